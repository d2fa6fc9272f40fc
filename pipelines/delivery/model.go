// Package delivery is a drone delivery scheduler, built only
// from sluice's public API: it consumes delivery requests from Kafka,
// parses and validates them, runs the five-step workflow (check account,
// create package, check third-party transport, schedule drone, create
// delivery) concurrently per request with retries, and checkpoints. A
// request that fails for good after some steps succeeded becomes a
// compensation event for the supervisor (package supervisor), which undoes
// those steps in reverse order.
package delivery

import (
	"errors"
	"fmt"
	"math"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
)

// Location is a point on the map.
type Location struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// Request is a delivery request as callers send it. ID is assigned by the
// caller and makes every step idempotent. Priority, if set, is the
// request's level of priority (High, Normal or Low: 0 to 2); a request
// without one (nil: absent or null in the JSON, as every request of
// earlier versions without the field) is served at its owner's tier's
// level once the accounts service said it (Tier.Level). Deadline is when
// the delivery must be scheduled by: while a service fails, the request is
// retried and replayed until it could no longer be done in time, and only
// then compensated; a request without one (absent, or not after 1970) is
// given SchedulerConfig.DefaultHorizon from its first failure.
type Request struct {
	ID       string    `json:"id"`
	Owner    string    `json:"owner"`
	Pickup   Location  `json:"pickup"`
	Dropoff  Location  `json:"dropoff"`
	Size     string    `json:"size"`
	WeightKg float64   `json:"weight_kg"`
	Deadline time.Time `json:"deadline"`
	Priority *int      `json:"priority,omitempty"`
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid delivery request")

// Parse decodes a request; malformed JSON is an error naming the problem.
func Parse(b []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return Request{}, fmt.Errorf("malformed delivery request: %w", err)
	}
	return r, nil
}

// MaxIDLen bounds a request's id and owner: they travel in URLs, record
// keys, step records and compensation events, which all have size limits;
// a longer one is invalid from the start rather than a failure half way.
const MaxIDLen = 256

// Validate checks a parsed request and names the first bad field.
func (r Request) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case r.ID == "":
		return bad("id is missing")
	case len(r.ID) > MaxIDLen:
		return bad("id is %d bytes long, more than %d", len(r.ID), MaxIDLen)
	case r.ID == "." || r.ID == "..":
		return bad("id %q names no resource in a URL path", r.ID)
	case r.Owner == "":
		return bad("owner is missing")
	case len(r.Owner) > MaxIDLen:
		return bad("owner is %d bytes long, more than %d", len(r.Owner), MaxIDLen)
	case r.Owner == "." || r.Owner == "..":
		return bad("owner %q names no resource in a URL path", r.Owner)
	case !validLoc(r.Pickup):
		return bad("pickup %v is not a location", r.Pickup)
	case !validLoc(r.Dropoff):
		return bad("dropoff %v is not a location", r.Dropoff)
	case r.WeightKg <= 0 || r.WeightKg > 25:
		return bad("weight %.1f kg is outside (0, 25]", r.WeightKg)
	case r.Size != "small" && r.Size != "medium" && r.Size != "large":
		return bad("size %q is not small, medium or large", r.Size)
	case r.Priority != nil && (*r.Priority < 0 || *r.Priority >= Levels):
		// Never served as high: dead-lettered with its reason.
		return fmt.Errorf("%w: priority %d is outside 0..%d: %w", ErrInvalid, *r.Priority, Levels-1, flow.ErrPriorityOutOfRange)
	}
	return nil
}

func validLoc(l Location) bool {
	return l.Lat >= -90 && l.Lat <= 90 && l.Lon >= -180 && l.Lon <= 180 && !(l.Lat == 0 && l.Lon == 0)
}

// DistanceKm is the great-circle distance between two locations.
func DistanceKm(a, b Location) float64 {
	const r = 6371.0
	rad := math.Pi / 180
	dLat, dLon := (b.Lat-a.Lat)*rad, (b.Lon-a.Lon)*rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(a.Lat*rad)*math.Cos(b.Lat*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * r * math.Asin(math.Sqrt(h))
}

// Step names a workflow step.
type Step string

// The workflow's steps, in order.
const (
	StepAccount    Step = "check_account"
	StepPackage    Step = "create_package"
	StepThirdParty Step = "check_third_party"
	StepDrone      Step = "schedule_drone"
	StepDelivery   Step = "create_delivery"
)

// Steps lists the workflow in order.
var Steps = []Step{StepAccount, StepPackage, StepThirdParty, StepDrone, StepDelivery}

// Progress is a request on its way through the workflow: what is done so
// far, so that a failure can be compensated step by step.
type Progress struct {
	Request    Request `json:"request"`
	Done       []Step  `json:"done"`
	ThirdParty bool    `json:"third_party,omitempty"`
	// Tier is the owner's tier, as check_account found it; with
	// Request.Priority it sets the level the later steps serve the
	// request at (PriorityOf).
	Tier    Tier   `json:"tier,omitempty"`
	DroneID string `json:"drone_id,omitempty"`
	// Raw is the request's record as it came, which a parking writes back
	// unchanged.
	Raw []byte `json:"-"`
	// mark identifies this copy of the request in step records (mode b);
	// unknown names a recorded step whose call by this copy went
	// unanswered, so that its own mark does not make a retry call again.
	mark    string
	unknown Step
	// replayed: read back from the park topic, it waited its turn at the
	// steps once already (flow.ServeFirst).
	replayed bool
}

// Compensation is the failure event the supervisor acts on: the request,
// the steps that succeeded (to undo in reverse order) and why it failed.
type Compensation struct {
	Progress Progress `json:"progress"`
	Stage    string   `json:"stage"`
	Reason   string   `json:"reason"`
}

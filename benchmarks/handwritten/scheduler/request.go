package main

import (
	"errors"
	"fmt"
	"time"
)

// request is a delivery request as the load generator writes it.
type request struct {
	ID       string    `json:"id"`
	Owner    string    `json:"owner"`
	Pickup   location  `json:"pickup"`
	Dropoff  location  `json:"dropoff"`
	Size     string    `json:"size"`
	WeightKg float64   `json:"weight_kg"`
	Deadline time.Time `json:"deadline"`
	Priority *int      `json:"priority,omitempty"`
}

type location struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// progress is what the delivery service is told, and what a compensation
// undoes: the steps done so far.
type progress struct {
	Request    request  `json:"request"`
	Done       []string `json:"done"`
	ThirdParty bool     `json:"third_party,omitempty"`
	Tier       string   `json:"tier,omitempty"`
	DroneID    string   `json:"drone_id,omitempty"`
}

// The steps, by the names the supervisor and the verification know.
const (
	stepAccount    = "check_account"
	stepPackage    = "create_package"
	stepThirdParty = "check_third_party"
	stepDrone      = "schedule_drone"
	stepDelivery   = "create_delivery"
)

const maxIDLen = 256

var errInvalid = errors.New("invalid delivery request")

// validate names the first bad field, by the scheduler's rules.
func (r *request) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case r.ID == "" || len(r.ID) > maxIDLen || r.ID == "." || r.ID == "..":
		return bad("id %q is not a usable id", r.ID)
	case r.Owner == "" || len(r.Owner) > maxIDLen || r.Owner == "." || r.Owner == "..":
		return bad("owner %q is not a usable owner", r.Owner)
	case !r.Pickup.valid():
		return bad("pickup %v is not a location", r.Pickup)
	case !r.Dropoff.valid():
		return bad("dropoff %v is not a location", r.Dropoff)
	case r.WeightKg <= 0 || r.WeightKg > 25:
		return bad("weight %.1f kg is outside (0, 25]", r.WeightKg)
	case r.Size != "small" && r.Size != "medium" && r.Size != "large":
		return bad("size %q is not small, medium or large", r.Size)
	case r.Priority != nil && (*r.Priority < 0 || *r.Priority > 2):
		return bad("priority %d is outside 0..2", *r.Priority)
	}
	return nil
}

func (l location) valid() bool {
	return l.Lat >= -90 && l.Lat <= 90 && l.Lon >= -180 && l.Lon <= 180 && !(l.Lat == 0 && l.Lon == 0)
}

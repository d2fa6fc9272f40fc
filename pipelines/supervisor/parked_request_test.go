package supervisor

import (
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// A request the scheduler parked is no compensation event: should one
// reach the supervisor (the two workers parking on one topic, as one
// SLUICE_RETRY_TOPIC set for both `sluice run delivery` and `sluice run
// supervisor` makes them), it must not be read as the order to undo its
// request — which is waiting for its replay, and would then be cancelled
// under it. A parked request used to carry no progress header, and read
// as an event naming no request (malformed, dead-lettered); the parking
// now carries its steps done, in a header of its own (HeaderParkedProgress).
func TestParkedRequestIsNotACompensationEvent(t *testing.T) {
	value, err := json.Marshal(delivery.Request{ID: "parked-1", Owner: "paying-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.3}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// The headers of a parking at check_third_party (as the scheduler's
	// park path writes them: its failure's, its position's, its steps done).
	headers := map[string]string{
		kafkasink.HeaderStage:         string(delivery.StepThirdParty),
		kafkasink.HeaderReason:        "PUT /third-party: HTTP 429 Too Many Requests",
		kafkasink.HeaderTopic:         "delivery-requests",
		delivery.HeaderParkedProgress: `{"done":["check_account","create_package"],"tier":"paying"}`,
	}
	ev, err := parse(value, func(k string) []byte {
		if v, ok := headers[k]; ok {
			return []byte(v)
		}
		return nil
	})
	if err == nil {
		t.Fatalf("a parked request reads as a compensation event of %s (steps done %v, stage %q): its undo would cancel the request its replay completes",
			ev.Progress.Request.ID, ev.Progress.Done, ev.Stage)
	}
	if !strings.Contains(err.Error(), "malformed compensation event") {
		t.Fatalf("parse: %v, want a malformed compensation event", err)
	}
}

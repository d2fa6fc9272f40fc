package delivery

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// stateFails is a deliveries service whose state lookup fails for good
// (a 4xx, an answer it cannot read).
type stateFails struct {
	Deliveries
	err   error
	calls int
}

func (s *stateFails) State(context.Context, string) (DeliveryState, error) {
	s.calls++
	return "", s.err
}

// A request refused for good (a business refusal: the account is
// suspended, 403) whose state lookup fails for good too is compensated,
// not parked: only a lookup that cannot tell now is asked again on a
// replay. Found in review: the judge took any error of Deliveries.State
// for "cannot tell now", and parked such a request again and again until
// its deadline — for a deadline in the year 9999 (valid input), for ever:
// every replay ran its steps again, was refused again, and was parked
// again (here after 10,000 parkings).
func TestPermanentRefusalIsNotParkedForEver(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	refused := fmt.Errorf("check_account: %w", &flow.HTTPError{Method: "GET", URL: "/accounts/o-1", Status: 403, Body: "account suspended"})
	for _, c := range []struct {
		name string
		err  error
	}{
		{"state answers 400", &flow.HTTPError{Method: "GET", URL: "/deliveries/d-1", Status: 400, Body: "bad id"}},
		{"state unreadable", errors.New(`GET /deliveries/d-1: unknown state "archived"`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if stream.Classify(c.err).Transient {
				t.Fatalf("%v is transient: not the case under test", c.err)
			}
			st := &stateFails{err: c.err}
			j := &judge{deliveries: st, parkTopic: "parked", horizon: time.Hour,
				ahead: func() time.Duration { return time.Second }, now: func() time.Time { return now }}
			deadline := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
			v := judged{Failure: stream.Failure{Stage: "check_account", Err: refused, Transient: false,
				Value: &Progress{Request: Request{ID: "d-1", Deadline: deadline}}}, parked: 10000, first: now.Add(-7 * 24 * time.Hour),
				backoff: time.Minute}
			j.decide(context.Background(), &v)
			if v.verdict != compensate {
				t.Fatalf("a request refused for good (403), its state lookup failing for good (%v), parked 10000 times already: "+
					"verdict %s (reason %q); want it compensated, not parked until %v", c.err, verdictStage[v.verdict], v.Err, deadline)
			}
		})
	}
}

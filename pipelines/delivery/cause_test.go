package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// stateDown is a deliveries service whose state lookup cannot answer now
// (503: down, transient).
type stateDown struct{ Deliveries }

func (stateDown) State(context.Context, string) (DeliveryState, error) {
	return "", &flow.HTTPError{Method: "GET", URL: "/deliveries/d-1", Status: 503, Body: "down for maintenance"}
}

// A request a service refused for good (here the packages service: 422,
// a business refusal) is compensated with the cause "refused", also when
// the judge's lookup of its state cannot answer and neither its deadline
// nor its parkings leave room to ask again later. Found in review: the
// judge wrapped the refusal in ErrDeadline or ErrOutOfParkings then, the
// event said "deadline" or "parkings", and the verification counted a
// refused deliverable request as cancelled for nothing.
func TestRefusalIsCompensatedAsRefusedWhenTheLookupCannotTell(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	refused := fmt.Errorf("create_package: %w", &flow.HTTPError{Method: "PUT", URL: "/packages/d-1", Status: 422, Body: "rejected by the service"})
	if stream.Classify(refused).Transient {
		t.Fatal("the refusal is transient: not the case under test")
	}
	for _, c := range []struct {
		name        string
		deadline    time.Time
		parked, max int
	}{
		{"its deadline near", now.Add(500 * time.Millisecond), 0, 0},
		{"its parkings spent", now.Add(time.Hour), 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := &judge{deliveries: stateDown{}, parkTopic: "parked", maxParkings: c.max, horizon: time.Hour,
				ahead: func() time.Duration { return time.Second }, now: func() time.Time { return now }}
			v := judged{Failure: stream.Failure{Stage: "create_package", Err: refused, Transient: false,
				Value: &Progress{Request: Request{ID: "d-1", Deadline: c.deadline}}}, parked: c.parked, first: now.Add(-time.Minute),
				backoff: time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			j.decide(ctx, &v)
			if v.verdict != compensate {
				t.Fatalf("verdict %s, want compensate", verdictStage[v.verdict])
			}
			if got := causeOf(v.Failure); got != CauseRefused {
				t.Fatalf("a request refused for good (422 from the packages service), the deliveries lookup down (503): "+
					"compensated with cause %q, want %q (reason %q): verification counts it a deliverable request cancelled for nothing",
					got, CauseRefused, v.Err)
			}
		})
	}
}

// A failure for good that no service refused (an answer that could not be
// read after the service acted, a backend that panicked) is compensated
// with the cause "error", not "refused". Found in review: every failure
// for good was "refused", and the verification excused the deliverable
// requests so cancelled.
func TestCauseIsRefusedOnlyForARefusal(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"an answer it could not read", fmt.Errorf("check_account: POST /accounts/o-1/check: decoding the answer: unexpected EOF (%w)", errUnreadableAnswer)},
		{"a backend that panicked", fmt.Errorf("create_package: %w", stream.NewPanicError("runtime error: index out of range [3] with length 3"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := stream.Classify(c.err)
			f := stream.Failure{Stage: "check_account", Err: c.err, Transient: cl.Transient}
			if got := causeOf(f); got == CauseRefused {
				t.Fatalf("%v (transient %v): cause %q; no service refused the request, yet the verification excuses its compensation",
					c.err, cl.Transient, got)
			}
		})
	}
}

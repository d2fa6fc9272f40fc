package delivery

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

// The scheduler's account check names the delivery it is made for, so
// that a 429 the accounts service answers (keyed by owner) counts against
// the delivery, in process and over HTTP. Without it the requests
// throttled at their first step passed for never throttled.
func TestAccountStepNamesItsDelivery(t *testing.T) {
	l := NewLedger()
	sim := Simulated(SimConfig{ThrottleRate: 1}, l, nil)
	srv := httptest.NewServer(HTTPHandler(sim))
	defer srv.Close()
	for name, b := range map[string]Backends{"in-process": sim, "over-http": HTTPBackends(srv.URL, NewHTTPClient(2))} {
		id := "d-" + name
		steps := stepCalls(b)
		if steps[0].step != StepAccount {
			t.Fatalf("the first step is %s, want %s", steps[0].step, StepAccount)
		}
		err := steps[0].fn(context.Background(), &Progress{Request: Request{ID: id, Owner: "acct-1"}})
		if stream.Classify(err).Reason != stream.ReasonThrottled {
			t.Fatalf("%s: the account check answered %v, want throttled", name, err)
		}
		if n := l.Throttled(id); n != 1 {
			t.Errorf("%s: the ledger counts %d throttled calls for %s, want 1", name, n, id)
		}
	}
}

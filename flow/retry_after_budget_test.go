package flow_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// throttledOnce runs one message through MapAsync with policy p against a
// service that answers 429 with Retry-After wait to its first call (and,
// if always, to every call) and accepts the others. It returns when each
// call came and its failure's NotBefore, relative to the first call, and
// whether the message failed.
func throttledOnce(t *testing.T, p flow.RetryPolicy, wait time.Duration, always bool) (calls []time.Duration, notBefore time.Duration, failed bool) {
	t.Helper()
	var mu sync.Mutex
	var start time.Time
	fn := func(ctx context.Context, x int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if start.IsZero() {
			start = time.Now()
		}
		calls = append(calls, time.Since(start))
		if len(calls) == 1 || always {
			return 0, &flow.HTTPError{Method: "PUT", URL: "/drones/1", Status: 429, Wait: wait, Body: "slow down"}
		}
		return x, nil
	}
	g := stream.New()
	stream.To(stream.Via(stream.From(g, source.Slice([]int{1})), flow.MapAsync(1, fn, flow.Retry(p))), sink.Discard[int]())
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		failed, notBefore = true, m.Value.NotBefore.Sub(start)
		return nil
	}))
	run(t, g)
	return calls, notBefore, failed
}

// A 429 whose Retry-After does not fit the retry budget ends the retries at
// once: the message fails after that one call, with NotBefore the end of
// the Retry-After, for its parking to replay it then. Retrying it in place
// within the budget can only call the service before the time it asked,
// meet the same 429 again and spend the attempts: with Interactive (at
// most 250 ms between attempts) a Retry-After of 1 s was cut to 250 ms, and
// the service was called three times within 0.5 s of asking for 1 s.
func TestRetryAfterBeyondTheBudgetEndsTheRetriesAtOnce(t *testing.T) {
	slow := flow.Background() // waits up to 30 s, within 5 min
	slow.MaxElapsed = 2 * time.Second
	for _, c := range []struct {
		name   string
		p      flow.RetryPolicy
		wait   time.Duration
		always bool
	}{
		{"Retry-After above max_delay", flow.Interactive(), time.Second, true},
		{"Retry-After above max_delay, then accepted", flow.Interactive(), time.Second, false},
		{"Retry-After past max_elapsed", slow, 5 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls, notBefore, failed := throttledOnce(t, c.p, c.wait, c.always)
				// The one call takes no time (synctest's clock): its answer
				// asks for the service to be called again c.wait after it.
				if len(calls) != 1 || !failed || notBefore != c.wait {
					t.Fatalf("calls at %v after the first answered 429 with Retry-After %v (failed: %v, NotBefore %v after the first call); "+
						"want one call, and a failure with NotBefore %v after it", calls, c.wait, failed, notBefore, c.wait)
				}
			})
		})
	}
}

// A 429 whose Retry-After fits the budget is retried in place, once that
// Retry-After is over (and at most 20% later), never before.
func TestRetryAfterWithinTheBudgetIsWaitedInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 200 * time.Millisecond // under Interactive's max_delay (250 ms)
		calls, _, failed := throttledOnce(t, flow.Interactive(), wait, false)
		if failed || len(calls) != 2 || calls[1] < wait || calls[1] > wait+wait/5 {
			t.Fatalf("calls at %v after the first answered 429 with Retry-After %v (failed: %v); want a second call %v to %v after it",
				calls, wait, failed, wait, wait+wait/5)
		}
	})
}

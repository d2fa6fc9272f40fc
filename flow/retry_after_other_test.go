package flow_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// A transient answer with a Retry-After longer than the policy's MaxDelay
// that is not a throttling one (a 504 or 502 with Retry-After) ends the
// retries at once, as a 429's does (async_retry.go checks any Retry-After),
// but the failure carries no NotBefore (async_call.go sets it only for
// ReasonThrottled): the message leaves after one call, and nothing tells
// its parking to wait what the service asked. RetryPolicy's doc says such
// a failure carries NotBefore at the end of the Retry-After. Before
// c7902e7 it was retried in place (the second call here succeeds).
func TestRetryAfterBeyondTheBudgetOfANonThrottlingAnswerCarriesNotBefore(t *testing.T) {
	for _, status := range []int{502, 504} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const wait = time.Second // above Interactive's max_delay (250 ms)
				var (
					mu        sync.Mutex
					calls     int
					start     time.Time
					failed    bool
					notBefore time.Duration
				)
				fn := func(ctx context.Context, x int) (int, error) {
					mu.Lock()
					defer mu.Unlock()
					calls++
					if calls == 1 {
						start = time.Now()
						return 0, &flow.HTTPError{Method: "PUT", URL: "/drones/1", Status: status, Wait: wait, Body: "try later"}
					}
					return x, nil
				}
				g := stream.New()
				stream.To(stream.Via(stream.From(g, source.Slice([]int{1})), flow.MapAsync(1, fn, flow.Retry(flow.Interactive()))), sink.Discard[int]())
				stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
					failed = true
					if !m.Value.NotBefore.IsZero() {
						notBefore = m.Value.NotBefore.Sub(start)
					}
					return nil
				}))
				run(t, g)
				if failed && notBefore != wait {
					t.Errorf("HTTP %d with Retry-After %v: failed after %d call(s) with NotBefore %v after the first (0: none); "+
						"want it retried, or failed with NotBefore %v", status, wait, calls, notBefore, wait)
				}
			})
		})
	}
}

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

// A service that never answers, behind adaptive timeouts that the calls'
// cuts keep raising and that extend the calls in flight: every call is
// still cut, never later than the policy's longest attempt timeout (its
// MaxAttemptTimeout, or what was left of MaxElapsed without it) from its
// send; no two attempts of a message overlap (a retry starts only once the
// attempt before it ended); every message fails, none is lost, and the
// stage ends.
func TestAHungServiceHasEveryCallCutWithinTheLongestAttemptTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ceiling time.Duration
		most    time.Duration // the longest a call may last
		opts    []flow.AsyncOption
	}{
		{"max_attempt_timeout 300ms, from send", 300 * time.Millisecond, 300 * time.Millisecond, []flow.AsyncOption{flow.TimeoutFromSend()}},
		{"max_attempt_timeout 300ms, from start", 300 * time.Millisecond, 300 * time.Millisecond, nil},
		{"within max_elapsed 120ms, from send", 0, 120 * time.Millisecond, []flow.AsyncOption{flow.TimeoutFromSend()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const n = 200
				p := flow.Interactive()
				p.MaxAttempts = 5
				p.AttemptTimeout, p.MaxElapsed, p.BaseDelay, p.MaxDelay = 20*time.Millisecond, 120*time.Millisecond, 5*time.Millisecond, 5*time.Millisecond
				p.TimeoutFactor, p.MaxAttemptTimeout = 3, tc.ceiling
				var mu sync.Mutex
				inFlight := map[int]bool{}
				attempts := map[int]int{}
				var longest time.Duration
				var overlaps, answered int
				a := flow.MapAsync(8, func(ctx context.Context, v int) (int, error) {
					mu.Lock()
					if inFlight[v] {
						overlaps++
					}
					inFlight[v] = true
					attempts[v]++
					mu.Unlock()
					flow.Sent(ctx)
					start := time.Now()
					<-ctx.Done() // no answer, ever
					mu.Lock()
					longest = max(longest, time.Since(start))
					inFlight[v] = false
					mu.Unlock()
					return 0, ctx.Err()
				}, append([]flow.AsyncOption{flow.Retry(p)}, tc.opts...)...)
				g := stream.New()
				stream.To(stream.Via(stream.From(g, source.Slice(ints(n))), a), sink.Func(func(context.Context, int) error {
					answered++
					return nil
				}))
				failed := map[int]bool{}
				stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
					failed[int(m.Offset)] = true
					return nil
				}))
				run(t, g)
				t.Logf("longest call %v, attempts of message 0: %d", longest, attempts[0])
				if overlaps != 0 {
					t.Errorf("%d attempts started while an earlier attempt of their message was in flight", overlaps)
				}
				if longest > tc.most {
					t.Errorf("a call lasted %v, want at most %v", longest, tc.most)
				}
				if answered != 0 || len(failed) != n {
					t.Errorf("%d answered and %d failed of %d messages, want all failed", answered, len(failed), n)
				}
				for v, k := range attempts {
					if k > p.MaxAttempts {
						t.Errorf("message %d was attempted %d times, want at most %d", v, k, p.MaxAttempts)
					}
				}
			})
		})
	}
}

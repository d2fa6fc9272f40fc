package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// onceThrottlingDrones answers the first call of each delivery 429 with a
// Retry-After of wait, and lets every later call through. It logs when
// each delivery's calls arrived.
type onceThrottlingDrones struct {
	delivery.Drones
	wait time.Duration

	mu    sync.Mutex
	calls map[string][]time.Time
}

func (d *onceThrottlingDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	d.mu.Lock()
	d.calls[id] = append(d.calls[id], time.Now())
	first := len(d.calls[id]) == 1
	d.mu.Unlock()
	if first {
		return "", &flow.HTTPError{Method: "PUT", URL: "/drones/" + id, Status: 429, Wait: d.wait, Body: "slow down"}
	}
	return d.Drones.Schedule(ctx, id, at)
}

// A call answered 429 with a Retry-After that does not fit the step's
// retry budget (longer than its max_delay, or than what is left of its
// max_elapsed) ends its retries at once and is parked to be replayed at
// the end of that Retry-After (and up to 20% later), whatever the
// scheduler's own replay delays (2 s, doubling): it is neither retried in
// place before the time the service asked (a 429 again, or a call the
// service did not want yet) nor held for the delay of a parking nobody
// said the length of. The first policy is the scheduler's default (400 ms
// within which to retry, at most 250 ms apart), the second flow.Interactive
// (2 s, at most 250 ms apart): with it, a Retry-After of 1 s was cut to
// 250 ms and the service called again three quarters of a second early.
// stampSlack bounds the time between a parking's computing of a replay
// delay and its stamping of the replay time, on a busy machine.
const stampSlack = 100 * time.Millisecond

func TestThrottledCallIsParkedUntilItsRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out Retry-After in real time: make test runs it, -short does not")
	}
	interactive := flow.Interactive()
	for _, c := range []struct {
		name   string
		policy *flow.RetryPolicy
		wait   time.Duration
	}{
		{"default policy, Retry-After 1s", nil, time.Second},
		{"default policy, Retry-After 3s", nil, 3 * time.Second},
		{"interactive policy, Retry-After 1s", &interactive, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 4
			brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
			drones := &onceThrottlingDrones{Drones: backends.Drones, wait: c.wait, calls: map[string][]time.Time{}}
			backends.Drones = drones
			p := startParking(t, brokers, producer, backends, func(cfg *delivery.SchedulerConfig) {
				cfg.ReplayAfter, cfg.MaxReplayDelay = 0, 0 // the defaults: 2 s, doubling up to 1 min
				cfg.Retry = c.policy
			})
			produceRequests(t, producer, n, time.Time{})
			p.await(t, "every request delivered", 30*time.Second, func() bool { return ledger.LiveCount("deliveries") == n })
			p.stop()
			drones.mu.Lock()
			defer drones.mu.Unlock()
			for i := range n {
				id := fmt.Sprintf("d-%03d", i)
				calls := drones.calls[id]
				if len(calls) != 2 || calls[1].Sub(calls[0]) < c.wait {
					t.Errorf("%s: drone calls at %v after the first, which answered 429 with Retry-After %v; "+
						"want one more call, after the Retry-After", id, relative(calls, calls[0]), c.wait)
				}
			}
			parked := readTopicNow(t, brokers, "parked")
			if len(parked) != n {
				t.Errorf("%d requests parked, want %d (each parked once, for its Retry-After)", len(parked), n)
			}
			for _, r := range parked {
				h := map[string]string{}
				for _, x := range r.Headers {
					h[x.Key] = string(x.Value)
				}
				failed, errF := time.Parse(time.RFC3339Nano, h[kafkasink.HeaderFailedAt])
				notBefore, errN := time.Parse(time.RFC3339Nano, h[kafkasink.HeaderNotBefore])
				replayAt, errR := time.Parse(time.RFC3339Nano, h[kafkasink.HeaderReplayAt])
				if err := errors.Join(errF, errN, errR); err != nil {
					t.Errorf("parked %s without failure, not-before and replay times: %v", r.Key, err)
					continue
				}
				// NotBefore is the end of the 429's Retry-After; the
				// failure is recorded after it came, the replay is set
				// after that: its delay, the wait left plus up to 20% of
				// it, is counted when the parking computes it and stamped
				// a moment later (stampSlack), so a jitter near its
				// largest lands past the 20% by that moment.
				if late := replayAt.Sub(notBefore); late < 0 || late > c.wait/5+stampSlack {
					t.Errorf("parked %s failed %v after its not-before, to replay %v after it; want 0 to %v after it (its Retry-After, 20%% of jitter)",
						r.Key, failed.Sub(notBefore).Round(time.Millisecond), late.Round(time.Millisecond), c.wait/5)
				}
			}
		})
	}
}

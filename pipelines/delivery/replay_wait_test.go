package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// throttlingDrones is a drone service that throttles: it answers 429 with
// Retry-After wait to every call while strict, and once it lets a trickle
// through, admits one call per second, answering 429 to the others. It
// logs when each delivery's calls arrived.
type throttlingDrones struct {
	delivery.Drones
	wait time.Duration

	mu         sync.Mutex
	trickle    bool
	lastAdmit  time.Time
	calls      map[string][]time.Time
	throttled  map[string]time.Time // when each delivery was first told to wait
	admittedAt []time.Time
}

func (d *throttlingDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	now := time.Now()
	d.mu.Lock()
	d.calls[id] = append(d.calls[id], now)
	admit := d.trickle && now.Sub(d.lastAdmit) >= time.Second
	if admit {
		d.lastAdmit = now
		d.admittedAt = append(d.admittedAt, now)
	} else if _, ok := d.throttled[id]; !ok {
		d.throttled[id] = now
	}
	d.mu.Unlock()
	if !admit {
		return "", &flow.HTTPError{Method: "PUT", URL: "/drones/" + id, Status: 429, Wait: d.wait, Body: "slow down"}
	}
	return d.Drones.Schedule(ctx, id, at)
}

// A parked request whose service answered 429 with Retry-After 20 s is
// not called again before those 20 s, even when the step's breaker closes
// on a call the throttling service let through: it asked the others to
// wait. Found in review: every request parked meanwhile was replayed at
// once, 20 s early; they met the throttle again, the breaker opened again,
// and the next lucky probe (at most 5 s later) replayed them again — a
// replay storm against a service that asked for 20 s ("113 calls of 20
// parked requests came before the Retry-After (20s) the service asked
// for"), among them requests whose last attempt was refused by the breaker
// the throttling had opened (their parking carries the Retry-After of an
// earlier attempt: stream.Failure.NotBefore).
//
// The replay delays of the harness are set to 20 s too (as in
// TestParkedRequestsReplayWhenTheServiceIsBack), so a request parked on
// the breaker's refusal rather than the 429 also waits 20 s: every call
// of a parked request inside its 20 s comes from ReplayDue's recovery.
func TestParkedThrottledRequestsWaitTheirRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out Retry-After in real time: make test runs it, -short does not")
	}
	const n = 20
	const wait = 20 * time.Second
	_, drones := throttledRun(t, n, wait, 0)
	drones.mu.Lock()
	defer drones.mu.Unlock()
	early, ids := 0, 0
	var first []string
	for i := range n {
		id := fmt.Sprintf("d-%03d", i)
		told := drones.throttled[id]
		counted := false
		for _, at := range drones.calls[id] {
			// The retries of the first copy end within its 400 ms budget:
			// a call more than 2 s after it was told to wait is a replay.
			if since := at.Sub(told); since > 2*time.Second && since < wait {
				early++
				if !counted {
					ids++
					counted = true
				}
				if len(first) < 3 {
					first = append(first, fmt.Sprintf("%s called %v after being told to retry after %v", id, since.Round(time.Millisecond), wait))
				}
			}
		}
	}
	t.Logf("drone calls admitted during the trickle: %d; parked requests' calls: %d", len(drones.admittedAt), early)
	if early > 0 {
		t.Fatalf("%d calls of %d parked requests came before the Retry-After (%v) the service asked for: %s",
			early, ids, wait, strings.Join(first, "; "))
	}
}

// loggingDrones fails every call with a 503 while failing, and logs when
// each delivery's calls arrived and whether they went through.
type loggingDrones struct {
	delivery.Drones
	mu      sync.Mutex
	failing bool
	calls   map[string][]time.Time
	okAt    map[string]time.Time
}

func (d *loggingDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	d.mu.Lock()
	failing := d.failing
	d.calls[id] = append(d.calls[id], time.Now())
	d.mu.Unlock()
	if failing {
		return "", &flow.HTTPError{Method: "PUT", URL: "/drones/" + id, Status: 503, Body: "down for maintenance"}
	}
	drone, err := d.Drones.Schedule(ctx, id, at)
	if err == nil {
		d.mu.Lock()
		d.okAt[id] = time.Now()
		d.mu.Unlock()
	}
	return drone, err
}

// The judge shortens the replay delay of a request whose deadline leaves
// less than its parkings' delay, so that it is replayed while it can still
// complete. But the replays are released in partition order (flow.Delay):
// a request parked behind one due later in its park partition (here the
// same key) waits for that one, and may come back past its deadline. It
// is then compensated (its deadline passed before it could be done), not
// scheduled late. Found in review: it was delivered after the deadline by
// which it had to be scheduled ("b-soon ... was scheduled 19.99s after its
// deadline").
//
// No breaker opens here (two requests fail a few times, below the
// breaker's 20 calls), so no recovery brings anything forward.
func TestReplayPastItsDeadlineIsNotScheduledLate(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for replay delays in real time: make test runs it, -short does not")
	}
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := &loggingDrones{Drones: backends.Drones, failing: true, calls: map[string][]time.Time{}, okAt: map[string]time.Time{}}
	backends.Drones = drones
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) {
		c.ReplayAfter, c.MaxReplayDelay = 8*time.Second, 8*time.Second
	})
	produce := func(r *kgo.Record) {
		if err := producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(requestWithDeadline("requests", "k", "a-long", time.Now().Add(time.Hour)))
	p.await(t, "a-long parked", 30*time.Second, func() bool { return p.stage("park").In >= 1 })
	deadline := time.Now().Add(4 * time.Second)
	produce(requestWithDeadline("requests", "k", "b-soon", deadline))
	p.await(t, "b-soon parked", 30*time.Second, func() bool { return p.stage("park").In >= 2 })
	drones.mu.Lock()
	drones.failing = false // the service is fine from now on
	drones.mu.Unlock()
	p.await(t, "b-soon has an outcome", 45*time.Second, func() bool {
		return ledger.Live("deliveries", "b-soon") || p.stage("compensation-events").In > 0
	})
	p.stop()
	drones.mu.Lock()
	defer drones.mu.Unlock()
	ok, done := drones.okAt["b-soon"]
	if !done {
		// Not scheduled: it must be compensated for its deadline.
		events := readTopicNow(t, brokers, "failures")
		if r := reasonOf(events); len(events) != 1 || !strings.Contains(r, delivery.ErrDeadline.Error()) {
			t.Fatalf("b-soon neither scheduled nor compensated for its deadline: %d events (first reason: %s)", len(events), r)
		}
		return
	}
	if ok.After(deadline) {
		t.Fatalf("b-soon (deadline in 4 s, parked with a delay cut to fit it) was scheduled %v after its deadline "+
			"(delivered: %v, compensated: %d); its drone calls came at %v: replayed behind a-long's 8 s, not in time",
			ok.Sub(deadline).Round(time.Millisecond), ledger.Live("deliveries", "b-soon"), p.stage("compensation-events").In,
			relative(drones.calls["b-soon"], deadline))
	}
}

// relative lists times as offsets from ref.
func relative(ts []time.Time, ref time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Sub(ref).Round(time.Millisecond).String())
	}
	return out
}

// Where parkings are bounded (SchedulerConfig.MaxParkings, the
// -max-parkings flag), replays the service did not ask for do not spend
// them: requests a throttling service asked to come back in 20 s are not
// replayed within these 12 s, and none runs out. Found in review: the
// storm of early replays (TestParkedThrottledRequestsWaitTheirRetryAfter)
// spent three parkings within seconds and compensated all 20 — deliveries
// that could still be made, cancelled.
func TestEarlyReplaysDoNotSpendParkings(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for replay delays in real time: make test runs it, -short does not")
	}
	const n = 20
	const wait = 20 * time.Second
	brokers, _ := throttledRun(t, n, wait, 3)
	var cancelled []string
	for _, ev := range readTopicNow(t, brokers, "failures") {
		if c, err := delivery.DecodeEvent(ev); err == nil && strings.HasPrefix(c.Progress.Request.ID, "d-") {
			cancelled = append(cancelled, c.Progress.Request.ID)
		}
	}
	if len(cancelled) > 0 {
		first := readTopicNow(t, brokers, "failures")
		t.Fatalf("%d of the %d requests told to retry after %v were compensated within 12 s, out of parkings spent by early replays "+
			"(first reason: %s)", len(cancelled), n, wait, reasonOf(first))
	}
}

// throttledRun parks n requests on a drone service that throttles with a
// Retry-After of wait (ReplayAfter and MaxReplayDelay wait too, so that
// nothing else brings a replay forward; MaxParkings maxParkings), then
// lets a trickle through while new work keeps arriving, a request every
// 250 ms for 12 s (one of its calls is the breaker's probe), and stops.
func throttledRun(t *testing.T, n int, wait time.Duration, maxParkings int) ([]string, *throttlingDrones) {
	t.Helper()
	brokers, producer, _, backends := parkingRig(t, delivery.SimConfig{})
	drones := &throttlingDrones{Drones: backends.Drones, wait: wait, calls: map[string][]time.Time{}, throttled: map[string]time.Time{}}
	backends.Drones = drones
	produceRequests(t, producer, n, time.Time{})
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) {
		c.ReplayAfter, c.MaxReplayDelay, c.MaxParkings = wait, wait, maxParkings
	})
	p.await(t, "every request parked", 30*time.Second, func() bool { return p.stage("park").In >= int64(n) })
	drones.mu.Lock()
	drones.trickle, drones.lastAdmit = true, time.Now()
	drones.mu.Unlock()
	for i := range 48 {
		r := requestWithDeadline("requests", "fresh", fmt.Sprintf("fresh-%d", i), time.Time{})
		if err := producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.stop()
	return brokers, drones
}

package supervisor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// throttlingCancels is a drone service whose cancels are throttled: 429
// with Retry-After wait to every cancel while strict; once it lets a
// trickle through, one cancel a second is admitted, the others answered
// 429. It logs when each delivery's cancels arrived.
type throttlingCancels struct {
	delivery.Drones
	wait time.Duration

	mu        sync.Mutex
	trickle   bool
	lastAdmit time.Time
	calls     map[string][]time.Time
	told      map[string]time.Time // when each delivery was first told to wait
	admitted  int
}

func (d *throttlingCancels) Cancel(ctx context.Context, id string) error {
	now := time.Now()
	d.mu.Lock()
	d.calls[id] = append(d.calls[id], now)
	admit := d.trickle && now.Sub(d.lastAdmit) >= time.Second
	if admit {
		d.lastAdmit = now
		d.admitted++
	} else if _, ok := d.told[id]; !ok {
		d.told[id] = now
	}
	d.mu.Unlock()
	if !admit {
		return &flow.HTTPError{Method: "DELETE", URL: "/drones/" + id, Status: 429, Wait: d.wait, Body: "slow down"}
	}
	return d.Drones.Cancel(ctx, id)
}

// A compensation parked because the drone service throttled its cancel
// (429, Retry-After 20 s; kafkasink.Backoff parks it for those 20 s) does
// not cancel again before them, even when an undo goes through after a
// run of failed ones (Recovery.Watch: "the services are back"): a
// throttle that lets a trickle through looks like that, over and over.
// Found in review: every compensation parked meanwhile was replayed at
// once each time, a replay storm against a service that asked for 20 s
// ("400 cancels of 20 parked compensations came before the Retry-After").
func TestParkedThrottledCompensationsWaitTheirRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out Retry-After in real time: make test runs it, -short does not")
	}
	const n = 20
	const wait = 20 * time.Second
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, topicFailures), kfake.SeedTopics(2, topicRetry), kfake.SeedTopics(1, topicDead))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	for _, id := range ids {
		r := delivery.Request{ID: id, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
		if err := b.Packages.Put(context.Background(), id, r); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Drones.Schedule(context.Background(), id, r.Pickup); err != nil {
			t.Fatal(err)
		}
	}
	drones := &throttlingCancels{Drones: b.Drones, wait: wait, calls: map[string][]time.Time{}, told: map[string]time.Time{}}
	b.Drones = drones
	produceEvents(t, brokers, ids)
	stop := runSupervisor(t, brokers, b, settings{attempts: 2, replayAfter: wait, maxReplayDelay: wait})
	cl := kafkaClient(t, brokers)
	waitFor(t, func() bool {
		n := int64(0)
		for _, end := range ends(t, cl, topicRetry, 2) {
			n += end
		}
		return n >= int64(len(ids))
	}, func() string { return fmt.Sprintf("not all parked: retry topic ends %v", ends(t, cl, topicRetry, 2)) })
	drones.mu.Lock()
	drones.trickle, drones.lastAdmit = true, time.Now()
	drones.mu.Unlock()
	// Compensations keep arriving, one every 250 ms, for 12 s.
	for i := range 48 {
		produceEvents(t, brokers, []string{fmt.Sprintf("fresh-%d", i)})
		time.Sleep(250 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	drones.mu.Lock()
	defer drones.mu.Unlock()
	early, who := 0, map[string]bool{}
	var first []string
	for _, id := range ids {
		told := drones.told[id]
		for _, at := range drones.calls[id] {
			// The first copy's two attempts come within milliseconds: a
			// cancel more than 2 s after it was told to wait is a replay's.
			if since := at.Sub(told); since > 2*time.Second && since < wait {
				early++
				who[id] = true
				if len(first) < 3 {
					first = append(first, fmt.Sprintf("%s cancelled %v after being told to retry after %v", id, since.Round(time.Millisecond), wait))
				}
			}
		}
	}
	t.Logf("cancels admitted during the trickle: %d; parked compensations' cancels: %d", drones.admitted, early)
	if early > 0 {
		t.Fatalf("%d cancels of %d parked compensations came before the Retry-After (%v) the service asked for: %s",
			early, len(who), wait, strings.Join(first, "; "))
	}
}

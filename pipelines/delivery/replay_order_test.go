package delivery_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// parkedFor is a record of request id as the park sink writes it, parked
// at its drone step, due back at due; every such record has the same key,
// so that they share a partition of the park topic.
func parkedFor(id string, due time.Time) *kgo.Record {
	b, _ := json.Marshal(delivery.Request{ID: id, Owner: "o-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1})
	now := time.Now().UTC()
	return &kgo.Record{Topic: "parked", Key: []byte("one-partition"), Value: b, Headers: []kgo.RecordHeader{
		{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepDrone)},
		{Key: kafkasink.HeaderReason, Value: []byte("PUT /drones/" + id + ": HTTP 429 Too Many Requests")},
		{Key: kafkasink.HeaderFailedAt, Value: []byte(now.Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderFirstFailure, Value: []byte(now.Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderReplayAt, Value: []byte(due.UTC().Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderParkings, Value: []byte("1")},
	}}
}

// A replay comes back at its own time, not behind a replay due later in
// its partition of the park topic: parked requests wait different times
// (a Retry-After of 1 s, a parking's doubled delay of 8 s, a stale mark's
// 10 s), and one due later must not hold back those behind it. Found
// measuring a saturated drain: throttled requests, due 1 s after their
// parking, came back seconds late, together, behind a request parked
// again with a longer delay.
func TestReplayIsNotHeldBehindOneDueLaterInItsPartition(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	ctx := context.Background()
	later := time.Now().Add(time.Minute)
	if err := producer.ProduceSync(ctx, parkedFor("r-later", later), parkedFor("r-due", time.Now())).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "r-due delivered before r-later is due (a minute from now)", 20*time.Second, func() bool {
		return ledger.Live("deliveries", "r-due")
	})
	p.stop()
	if ledger.Live("deliveries", "r-later") {
		t.Errorf("r-later delivered before its time (%v)", later)
	}
}

// gatedAccounts holds every check until open is closed, and logs the
// deliveries checked in the order their calls came.
type gatedAccounts struct {
	inner interface {
		Check(ctx context.Context, owner string) (delivery.Account, error)
	}
	open chan struct{}
	mu   sync.Mutex
	log  []string
}

func (a *gatedAccounts) Check(ctx context.Context, owner string) (delivery.Account, error) {
	a.mu.Lock()
	a.log = append(a.log, delivery.DeliveryOf(ctx))
	a.mu.Unlock()
	select {
	case <-a.open:
	case <-ctx.Done():
		return delivery.Account{}, ctx.Err()
	}
	return a.inner.Check(ctx, owner)
}

func (a *gatedAccounts) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

// A replay has waited its turn once already: at a step it calls, it goes
// ahead of the fresh requests waiting for a slot (of its level), rather
// than behind a whole window of them. The 8 slots of check_account held
// while 5 fresh requests more wait, then a replay arrives: when one slot
// frees, the replay is the next called.
func TestReplayIsCalledBeforeTheFreshRequestsWaiting(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	acct := &gatedAccounts{inner: backends.Accounts, open: make(chan struct{}, 1)}
	backends.Accounts = acct
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) {
		c.Parallelism = 8 // the adaptive limit's floor too: 8 slots, a window of 16
		r := delivery.DefaultRetry()
		r.AttemptTimeout, r.MaxElapsed, r.TimeoutFactor = time.Minute, 2*time.Minute, 0 // the held calls are not cut
		c.Retry = &r
	})
	produceRequests(t, producer, 13, time.Time{})
	step := p.sch.Steps[delivery.StepAccount]
	p.await(t, "8 calls held, 5 fresh requests waiting", 20*time.Second, func() bool {
		return len(acct.calls()) == 8 && held(step) == 13
	})
	if err := producer.ProduceSync(context.Background(), parkedFor("r-replay", time.Now())).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.await(t, "the replay waiting at check_account", 20*time.Second, func() bool { return held(step) == 14 })
	acct.open <- struct{}{} // one call returns: one slot
	p.await(t, "a ninth call", 20*time.Second, func() bool { return len(acct.calls()) >= 9 })
	close(acct.open)
	p.await(t, "all 14 delivered", 20*time.Second, func() bool { return ledger.LiveCount("deliveries") >= 14 })
	p.stop()
	if calls := acct.calls(); calls[8] != "r-replay" {
		t.Fatalf("check_account called for %v: want r-replay ninth, in the first slot freed", calls)
	}
}

// held is how many requests a step holds: called or waiting.
func held(a *flow.Async[*delivery.Progress, *delivery.Progress]) int64 {
	st := a.Stats()
	return st.InFlight + st.Waiting
}

package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// A Redis that answers with an error reply during a failover or a restart
// (READONLY from a demoted primary; LOADING while it reads the append-only
// file docs/delivery.md asks for) is waited out like one that does not answer.
// Found in review: Begin failed for good (the request compensated at
// once), and a booking that succeeded failed for good on its Record ("a
// 300 ms failover failed the step instead of waiting").
func TestRedisErrorReplyIsWaitedOut(t *testing.T) {
	addr := testenv.Redis(t)
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	ctx := context.Background()
	d := &fakeDrone{acted: true, booked: map[string]bool{}}
	r := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: d.call,
		lookup: d.lookup, staleAfter: time.Minute}
	readOnly := func() {
		if err := cl.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var healed sync.WaitGroup
	heal := func() { _ = cl.Do(ctx, "REPLICAOF", "NO", "ONE").Err() }
	healLater := func() {
		healed.Add(1)
		go func() { defer healed.Done(); time.Sleep(300 * time.Millisecond); heal() }()
	}
	defer heal()
	defer healed.Wait()

	// 1: Redis read-only for 300 ms before Begin.
	readOnly()
	healLater()
	start := time.Now()
	err := r.run(ctx, &Progress{Request: Request{ID: "ro1"}})
	t.Logf("Begin against a read-only Redis (healed after 300 ms): after %v: %v (transient %v)",
		time.Since(start).Round(time.Millisecond), err, stream.Classify(err).Transient)
	time.Sleep(400 * time.Millisecond)

	// 2: Redis turns read-only during the call.
	r.call = func(ctx context.Context, p *Progress) error {
		readOnly()
		healLater()
		return d.call(ctx, p)
	}
	err2 := r.run(ctx, &Progress{Request: Request{ID: "ro2"}})
	t.Logf("Record after a booking, Redis read-only for 300 ms: %v (transient %v); booked %v",
		err2, stream.Classify(err2).Transient, d.booked["ro2"])
	if err != nil || err2 != nil {
		t.Fatalf("a 300 ms failover failed the step instead of waiting (MaxStoreOutage 1 min)")
	}
}

// Two workers whose clocks disagree by more than StaleAfter/2 (here
// StaleAfter 2 s, B's clock 1.6 s ahead of A's): a mark's age is read
// on the store's clock, so B does not find A's mark stale while A's call,
// inside its StaleAfter/2 bound, is in flight, and does not book too.
// Found in review, when marks carried the writer's clock and were aged by
// the reader's: "drone booked 2 times for one request", 3 of 3 runs.
func TestWorkerClocksDoNotAgeAMark(t *testing.T) {
	store, ledger, b, call := droneStep(t)
	lookup := func(ctx context.Context, p *Progress) (string, bool, error) {
		return b.Drones.Booking(ctx, p.Request.ID)
	}
	const staleAfter = 2 * time.Second
	bTried := make(chan struct{}) // B ran while A's call was in flight
	aCall := func(ctx context.Context, p *Progress) error {
		select {
		case <-bTried:
		case <-ctx.Done():
			return ctx.Err()
		}
		return call(ctx, p)
	}
	a := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: aCall,
		staleAfter: staleAfter, lookup: lookup}
	bs := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: call,
		staleAfter: staleAfter, lookup: lookup, clock: func() time.Time { return time.Now().Add(1600 * time.Millisecond) }}
	req := Request{ID: "skew", Pickup: Location{Lat: 1, Lon: 1}}
	ctx := context.Background()
	aErr := make(chan error, 1)
	go func() { aErr <- a.run(ctx, &Progress{Request: req}) }()
	time.Sleep(500 * time.Millisecond) // A's call is in flight, within its 1 s bound
	bErr := bs.run(ctx, &Progress{Request: req})
	close(bTried)
	if err := <-aErr; err != nil {
		t.Fatalf("copy A: %v", err)
	}
	if !errors.Is(bErr, ErrOutcomeUnknown) || !stream.Classify(bErr).Transient {
		t.Fatalf("copy B while A's call is in flight: %v, want a transient unknown outcome (wait)", bErr)
	}
	if n := ledger.Created("drones", "skew"); n != 1 {
		t.Fatalf("drone booked %d times for one request (want 1)", n)
	}
}

package delivery

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// fakeDrone is a drone service whose answer the test sets, and which
// remembers whether a call acted.
type fakeDrone struct {
	calls  int
	answer error // returned by the call; a timeout may still have acted
	acted  bool  // acted sets whether a call books, whatever it answers
	booked map[string]bool
}

func (d *fakeDrone) call(ctx context.Context, p *Progress) error {
	d.calls++
	if d.acted {
		d.booked[p.Request.ID] = true
	}
	if d.answer != nil {
		return d.answer
	}
	p.DroneID = "drone-" + p.Request.ID
	return nil
}

func (d *fakeDrone) lookup(_ context.Context, p *Progress) (string, bool, error) {
	if d.booked[p.Request.ID] {
		return "drone-" + p.Request.ID, true, nil
	}
	return "", false, nil
}

// A non-idempotent step behind step records: done once, skipped on replay;
// a call the service refused may be made again; a call whose outcome is
// unknown (it timed out, its worker was killed) is not made again while it
// may still be in flight, and afterwards the service says what happened:
// booked, the step is recorded done; not booked, it is called again. A
// step that cannot be looked up is compensated then.
func TestRecordedStep(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	ctx := context.Background()
	d := &fakeDrone{acted: true, booked: map[string]bool{}}
	fresh := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: d.call,
		lookup: d.lookup, staleAfter: time.Hour}
	// stale finds any mark older than 200 ms stale (the tests wait twice
	// that before using it); its calls must end within 100 ms of their mark.
	stale := *fresh
	stale.staleAfter = 200 * time.Millisecond
	progress := func(id string) *Progress { return &Progress{Request: Request{ID: id}} }

	// Done once; a replay skips the call and gets the recorded value.
	if err := fresh.run(ctx, progress("a")); err != nil || d.calls != 1 {
		t.Fatalf("first: %v, %d calls", err, d.calls)
	}
	replay := progress("a")
	if err := fresh.run(ctx, replay); err != nil || d.calls != 1 || replay.DroneID != "drone-a" {
		t.Fatalf("replay: %v, %d calls, drone %q", err, d.calls, replay.DroneID)
	}

	// The service answered "unavailable": it did not act, so a retry calls
	// again.
	d.acted, d.answer = false, stream.Transient(errors.New("503 service unavailable"))
	p := progress("b")
	if err := fresh.run(ctx, p); !stream.Classify(err).Transient || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("refused call: %v", err)
	}
	d.acted, d.answer = true, nil
	if err := fresh.run(ctx, p); err != nil || d.calls != 3 {
		t.Fatalf("retry after a refusal: %v, %d calls", err, d.calls)
	}

	// An attempt that timed out may have acted (here it did): not called
	// again while the call may be in flight, by this copy or another...
	d.answer = context.DeadlineExceeded
	p = progress("c")
	if err := fresh.run(ctx, p); !errors.Is(err, ErrOutcomeUnknown) || !stream.Classify(err).Transient {
		t.Fatalf("timed out call: %v (must be a transient unknown outcome)", err)
	}
	d.answer = nil
	for _, copy := range []*Progress{p, progress("c")} {
		if err := fresh.run(ctx, copy); !errors.Is(err, ErrOutcomeUnknown) || d.calls != 4 {
			t.Fatalf("retry while the call may be in flight: %v, %d calls", err, d.calls)
		}
	}
	// ...then the service says it booked: recorded done, not called.
	time.Sleep(2 * stale.staleAfter) // older than staleAfter on the store's millisecond clock
	if err := stale.run(ctx, p); err != nil || d.calls != 4 || p.DroneID != "drone-c" {
		t.Fatalf("after the call must have ended: %v, %d calls, drone %q", err, d.calls, p.DroneID)
	}
	if err := fresh.run(ctx, progress("c")); err != nil || d.calls != 4 {
		t.Fatalf("a replay after the resolution: %v, %d calls", err, d.calls)
	}

	// A worker killed between the call and its record, the call not
	// booked: a replay waits, then takes the step over and calls.
	if _, err := store.Begin(ctx, "d", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	if err := fresh.run(ctx, progress("d")); !errors.Is(err, ErrOutcomeUnknown) || d.calls != 4 {
		t.Fatalf("replay after a crash mid-call: %v, %d calls", err, d.calls)
	}
	time.Sleep(2 * stale.staleAfter) // older than staleAfter on the store's millisecond clock
	if err := stale.run(ctx, progress("d")); err != nil || d.calls != 5 {
		t.Fatalf("replay once the crashed call has ended: %v, %d calls", err, d.calls)
	}

	// A step without a lookup is compensated once its call must have ended.
	noLookup := stale
	noLookup.lookup = nil
	if _, err := store.Begin(ctx, "e", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * stale.staleAfter) // older than staleAfter on the store's millisecond clock
	if err := noLookup.run(ctx, progress("e")); !errors.Is(err, ErrOutcomeUnknown) || stream.Classify(err).Transient || d.calls != 5 {
		t.Fatalf("no lookup: %v (must be permanent), %d calls", err, d.calls)
	}
}

// The step store down for a while: a request waits for it rather than
// fail, and the wait gives up with ErrStoreOutage only after the limit.
func TestRecordedStepWaitsForTheStore(t *testing.T) {
	addr := testenv.Redis(t)
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	d := &fakeDrone{acted: true, booked: map[string]bool{}}
	failing := &flakyStore{StepStore: store, failures: 3}
	r := &recordedStep{store: failing, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: d.call,
		lookup: d.lookup, staleAfter: time.Hour}
	ctx := context.Background()
	if err := r.run(ctx, &Progress{Request: Request{ID: "w"}}); err != nil || d.calls != 1 || failing.failures != 0 {
		t.Fatalf("after three failed Begins: %v, %d calls, %d failures left", err, d.calls, failing.failures)
	}
	failing.failures = 1 << 30
	r.wait = &storeWaiter{limit: 200 * time.Millisecond}
	err := r.run(ctx, &Progress{Request: Request{ID: "x"}})
	if !errors.Is(err, ErrStoreOutage) || !stream.IsFatal(err) {
		t.Fatalf("store down past the limit: %v, want a fatal ErrStoreOutage", err)
	}
}

// flakyStore fails Begin with a connection error a number of times.
type flakyStore struct {
	StepStore
	failures int
}

func (f *flakyStore) Begin(ctx context.Context, id string, step Step, mark string) (StepState, error) {
	if f.failures > 0 {
		f.failures--
		return StepState{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return f.StepStore.Begin(ctx, id, step, mark)
}

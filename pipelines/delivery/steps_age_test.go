package delivery

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
)

// ageHook acts on the first pipeline that reads a step record's age
// (PTTL), once: around is called with the pipeline sent (next) and decides
// what it answers.
type ageHook struct {
	mu     sync.Mutex
	fired  bool
	around func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error
}

func (h *ageHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *ageHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *ageHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		first := !h.fired && hasPTTL(cmds)
		h.fired = h.fired || first
		h.mu.Unlock()
		if !first {
			return next(ctx, cmds)
		}
		return h.around(ctx, cmds, next)
	}
}

func hasPTTL(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if strings.EqualFold(c.Name(), "pttl") {
			return true
		}
	}
	return false
}

// ageRace is copy B of a request on a worker whose step records go
// through hook, and copy A's mark on the drone step written by another
// worker: A's call is in flight (not yet at the drone service). B's run
// must not book while A's call may still land: the drone would be booked
// twice.
func ageRace(t *testing.T, id string, hook *ageHook) (b *recordedStep, ledger *Ledger, sim Backends, other *redis.Client) {
	t.Helper()
	addr := testenv.Redis(t)
	other = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { other.Close() })
	cl := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { cl.Close() })
	cl.AddHook(hook)
	store := NewRedisSteps(cl, time.Minute)
	t.Cleanup(store.Close)
	ledger = NewLedger()
	sim = SimulatedNonIdempotent(SimConfig{}, ledger, nil)
	if err := other.Set(context.Background(), stepKey(id, StepDrone), "s:copy-a", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	b = &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: 10 * time.Second,
		call: func(ctx context.Context, p *Progress) error {
			d, err := sim.Drones.Schedule(ctx, p.Request.ID, p.Request.Pickup)
			p.DroneID = d
			return err
		},
		lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
			return sim.Drones.Booking(ctx, p.Request.ID)
		}}
	return b, ledger, sim, other
}

// A mark another copy has just written, found by Begin, whose age could
// not be read (the connection to Redis broke on that second round trip),
// is not stale: the other copy's call may be in flight. Taken for stale,
// the service was asked (not booked yet), the step taken over and the
// drone booked, and then booked again when the first copy's call landed.
func TestMarkWhoseAgeIsUnreadIsNotStale(t *testing.T) {
	hook := &ageHook{around: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		err := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}}
	b, ledger, sim, _ := ageRace(t, "age-unread", hook)
	_ = b.run(context.Background(), &Progress{Request: Request{ID: "age-unread"}})
	bookedOnce(t, ledger, sim, "age-unread", "a fresh mark whose age was not read was taken for stale")
}

// bookedOnce lets copy A's call for id, in flight all along, land, and
// checks that the drone was booked once; why says what a second booking
// means.
func bookedOnce(t *testing.T, ledger *Ledger, sim Backends, id, why string) {
	t.Helper()
	if _, err := sim.Drones.Schedule(context.Background(), id, Location{}); err != nil {
		t.Fatal(err)
	}
	if n := ledger.Created("drones", id); n != 1 {
		t.Fatalf("drone booked %d times, want once: %s", n, why)
	}
}

// A mark that Begin found and that is gone when its age is read (its copy
// was told no by the service and abandoned it) may be back by the time
// the service is asked: that copy, retrying under the same mark, began
// the step again and called. The record holds what Begin read, so a
// take-over of it succeeds; the mark gone must not read as stale.
func TestMarkGoneAndBackIsNotStale(t *testing.T) {
	var other *redis.Client
	key := stepKey("age-aba", StepDrone)
	hook := &ageHook{around: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		// Copy A: the service said no, its mark is abandoned...
		if err := other.Del(ctx, key).Err(); err != nil {
			return err
		}
		err := next(ctx, cmds)
		// ...and its retry begins the step again, under its mark, and
		// calls (in flight).
		if err := other.Set(ctx, key, "s:copy-a", time.Minute).Err(); err != nil {
			return err
		}
		return err
	}}
	b, ledger, sim, cl := ageRace(t, "age-aba", hook)
	other = cl
	_ = b.run(context.Background(), &Progress{Request: Request{ID: "age-aba"}})
	bookedOnce(t, ledger, sim, "age-aba", "a mark gone and back between Begin and its age was taken for stale")
}

// heldAbandon is a step store whose abandons wait for hold: the worker
// cannot reach Redis for a while when its copy abandons its mark.
type heldAbandon struct {
	StepStore
	hold chan struct{}
}

func (s *heldAbandon) Abandon(ctx context.Context, id string, step Step, mark string) error {
	<-s.hold
	return s.StepStore.Abandon(context.Background(), id, step, mark)
}

// Copy A is told no by the drone service, and its abandon of its mark is
// held up (its worker cannot reach Redis) until the mark is stale. Copy B
// finds the stale mark and asks the service (not booked); meanwhile A's
// abandon lands and A's retry begins the step again and calls. B's
// take-over of the mark it read must fail: had A's retry begun under the
// same mark, the record would hold what B read, B would take over A's
// retry's mark and book while A's call is in flight.
func TestRetryAfterAnAbandonMarksAnew(t *testing.T) {
	store, ledger, b, call := droneStep(t)
	const staleAfter = 200 * time.Millisecond
	aStore := &heldAbandon{StepStore: store, hold: make(chan struct{})}
	inFlight, land := make(chan struct{}), make(chan struct{})
	calls := 0
	aCall := func(ctx context.Context, p *Progress) error {
		calls++
		if calls == 1 {
			return &flow.HTTPError{Status: http.StatusServiceUnavailable} // no booking
		}
		close(inFlight)
		<-land
		return call(context.Background(), p) // the booking lands, whatever the caller's deadline
	}
	booking := func(ctx context.Context, p *Progress) (string, bool, error) {
		return b.Drones.Booking(ctx, p.Request.ID)
	}
	a := &recordedStep{store: aStore, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: aCall,
		staleAfter: staleAfter, lookup: booking}
	req := Request{ID: "abandoned", Pickup: Location{Lat: 1, Lon: 1}}
	ctx := context.Background()
	pa := &Progress{Request: req}
	aErr := make(chan error, 1)
	go func() { aErr <- a.run(ctx, pa) }()
	time.Sleep(staleAfter + 100*time.Millisecond) // A's mark, still there, is stale
	bStep := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: call,
		staleAfter: staleAfter, lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
			close(aStore.hold)
			t.Logf("copy A, told no: %v", <-aErr)
			go func() { aErr <- a.run(ctx, pa) }()
			<-inFlight
			return booking(ctx, p)
		}}
	if err := bStep.run(ctx, &Progress{Request: req}); err != nil {
		t.Logf("copy B: %v", err)
	}
	close(land)
	if err := <-aErr; err != nil {
		t.Logf("copy A's retry: %v", err)
	}
	if n := ledger.Created("drones", "abandoned"); n != 1 {
		t.Fatalf("drone booked %d times, want once", n)
	}
}

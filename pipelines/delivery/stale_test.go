package delivery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// cutOffStore is worker A's view of Redis during a partition: its first
// Begin reaches the server (SET NX GET applied) but the reply is lost;
// then every operation fails as a refused connection until healed.
type cutOffStore struct {
	StepStore
	mu       sync.Mutex
	landed   bool
	healed   chan struct{}
	returned chan struct{} // closed when a Begin after the heal returned
	once     sync.Once
}

func (s *cutOffStore) Begin(ctx context.Context, id string, step Step, mark string) (StepState, error) {
	s.mu.Lock()
	first := !s.landed
	s.landed = true
	s.mu.Unlock()
	if first {
		_, _ = s.StepStore.Begin(ctx, id, step, mark)                                     // applied by Redis...
		return StepState{}, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET} // ...reply lost
	}
	select {
	case <-s.healed:
	default:
		return StepState{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	st, err := s.StepStore.Begin(ctx, id, step, mark)
	s.once.Do(func() { close(s.returned) })
	return st, err
}

// Two workers, two copies of one request (a replay from the retry topic
// on one, the partition on the other). Worker A's Begin lands but its
// reply is lost; A waits out the Redis
// outage (storeWaiter, up to MaxStoreOutage, 2 min by default, well past
// StaleAfter, 30 s). Meanwhile worker B (another process: the partition
// moved, or B replays a parked copy from the retry topic) finds A's mark
// older than StaleAfter, asks the drone service (not booked: A never
// called), and takes the step over. A, back, reads its *own* old mark; it
// must renew it before calling, find that B took it over, and not call.
// Before the fix A called on its old mark and both booked (drone booked 2
// times, 3 of 3 runs).
func TestOwnStaleMarkIsRenewedBeforeTheCall(t *testing.T) {
	store, ledger, b, call := droneStep(t)
	const staleAfter = 200 * time.Millisecond
	aStore := &cutOffStore{StepStore: store, healed: make(chan struct{}), returned: make(chan struct{})}
	tookOver := make(chan struct{})
	bStore := &takeOverSignal{StepStore: store, done: tookOver}
	// A's booking takes the drone service a few ms (2-10 ms in the
	// simulation); B's TakeOver, one Redis round trip, lands meanwhile.
	aCall := func(ctx context.Context, p *Progress) error {
		select {
		case <-tookOver:
		case <-time.After(time.Second):
		}
		return call(ctx, p)
	}
	a := &recordedStep{store: aStore, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: aCall,
		staleAfter: staleAfter, lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
			return b.Drones.Booking(ctx, p.Request.ID)
		}}
	bStep := &recordedStep{store: bStore, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: call,
		staleAfter: staleAfter, lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
			v, booked, err := b.Drones.Booking(ctx, p.Request.ID)
			// While B's "not booked" answer travels back and B takes over,
			// A's partition heals and A's Begin goes through.
			close(aStore.healed)
			<-aStore.returned
			return v, booked, err
		}}
	req := Request{ID: "r1", Pickup: Location{Lat: 1, Lon: 1}}
	ctx := context.Background()
	aErr := make(chan error, 1)
	go func() { aErr <- a.run(ctx, &Progress{Request: req}) }()
	time.Sleep(staleAfter + 100*time.Millisecond) // A's mark is now stale to everyone else
	if err := bStep.run(ctx, &Progress{Request: req}); err != nil {
		t.Logf("copy B: %v", err)
	}
	if err := <-aErr; err != nil {
		t.Logf("copy A: %v", err)
	}
	if n := ledger.Created("drones", "r1"); n != 1 {
		t.Fatalf("drone booked %d times for one request (want 1)", n)
	}
}

type takeOverSignal struct {
	StepStore
	done chan struct{}
}

func (s *takeOverSignal) TakeOver(ctx context.Context, id string, step Step, from StepState, mark string) (bool, error) {
	ok, err := s.StepStore.TakeOver(ctx, id, step, from, mark)
	close(s.done)
	return ok, err
}

// slowBegin answers Begin late: the SET is applied at once (its mark's
// time is then), the reply arrives after delay (a slow or queued batch).
// It notes when each mark was written (Begin, TakeOver).
type slowBegin struct {
	StepStore
	delay time.Duration
	marks []time.Time
}

func (s *slowBegin) Begin(ctx context.Context, id string, step Step, mark string) (StepState, error) {
	s.marks = append(s.marks, time.Now())
	st, err := s.StepStore.Begin(ctx, id, step, mark)
	time.Sleep(s.delay)
	return st, err
}

func (s *slowBegin) TakeOver(ctx context.Context, id string, step Step, from StepState, mark string) (bool, error) {
	s.marks = append(s.marks, time.Now())
	return s.StepStore.TakeOver(ctx, id, step, from, mark)
}

// A call ends within StaleAfter/2 of the time in its mark, not of Begin's
// answer: resolve counts on no call being in flight past StaleAfter after
// the mark. A Begin that answers too late for that does not call; its
// retry renews the mark and calls. Before the fix the bound counted from
// Begin's answer: "the call may run until 102ms after its mark turned
// stale".
func TestCallEndsWithinStaleAfterOfItsMark(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	const staleAfter = 400 * time.Millisecond
	var deadline time.Time
	calls := 0
	sb := &slowBegin{StepStore: store, delay: 300 * time.Millisecond}
	r := &recordedStep{store: sb, wait: &storeWaiter{limit: time.Minute},
		step: StepDrone, staleAfter: staleAfter, call: func(ctx context.Context, p *Progress) error {
			deadline, _ = ctx.Deadline()
			calls++
			return nil
		}}
	p := &Progress{Request: Request{ID: "s1"}}
	err := r.run(context.Background(), p)
	if !stream.Classify(err).Transient || calls != 0 {
		t.Fatalf("a Begin answered 300 ms late with StaleAfter 400 ms: %v, %d calls; want a transient error and no call", err, calls)
	}
	if err := r.run(context.Background(), p); err != nil || calls != 1 {
		t.Fatalf("the retry: %v, %d calls", err, calls)
	}
	if mark := sb.marks[len(sb.marks)-1]; deadline.After(mark.Add(staleAfter / 2)) {
		t.Fatalf("the call may run until %v after its mark (StaleAfter %v)", deadline.Sub(mark).Round(time.Millisecond), staleAfter)
	}
}

// A booking the drone service answered 200 with an answer that is not
// read acted: its outcome is unknown, the mark stays (a later copy asks
// the service), and the step is not abandoned as if the service had said
// no. Before, the decoding error counted as a refusal: the mark was
// removed and the next copy booked again.
func TestUnreadableAnswerLeavesTheOutcomeUnknown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`<html>booked</html>`)) // not the JSON it should be
	}))
	defer srv.Close()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	b := HTTPBackends(srv.URL, NewHTTPClient(2))
	r := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: time.Minute,
		call: func(ctx context.Context, p *Progress) error {
			_, err := b.Drones.Schedule(ctx, p.Request.ID, p.Request.Pickup)
			return err
		}}
	err := r.run(context.Background(), &Progress{Request: Request{ID: "u1"}})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a 200 answer that is not JSON: %v, want ErrOutcomeUnknown", err)
	}
	if st, err := store.Begin(context.Background(), "u1", StepDrone, "another copy"); err != nil || st.StartedBy == "" {
		t.Fatalf("the step record after it: %+v %v, want the first copy's mark kept", st, err)
	}
}

// droneStep is a step store in a real redis-server and a simulated drone
// service that books on every call, with the call a recorded drone step
// makes.
func droneStep(t *testing.T) (*RedisSteps, *Ledger, Backends, stepFunc) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { cl.Close() })
	store := NewRedisSteps(cl, time.Minute)
	t.Cleanup(store.Close)
	ledger := NewLedger()
	b := SimulatedNonIdempotent(SimConfig{}, ledger, nil)
	return store, ledger, b, func(ctx context.Context, p *Progress) error {
		id, err := b.Drones.Schedule(ctx, p.Request.ID, p.Request.Pickup)
		if err == nil {
			p.DroneID = id
		}
		return err
	}
}

// A request that finds a mark not yet stale is parked until the moment it
// is: its error asks for that wait (Retry-After), which the parking
// honours. Before, the parking's own delays (2, 4, 8, 16, 32 s) could pass
// a 30 s staleness by half a minute: a run verified with a one-minute
// wait found a request with no outcome yet.
func TestUnstaleMarkAsksToWaitUntilStale(t *testing.T) {
	store, _, b, call := droneStep(t)
	const staleAfter = 10 * time.Second
	r := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: call,
		staleAfter: staleAfter, lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
			return b.Drones.Booking(ctx, p.Request.ID)
		}}
	ctx := context.Background()
	if _, err := store.Begin(ctx, "w1", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	err := r.run(ctx, &Progress{Request: Request{ID: "w1"}})
	c := stream.Classify(err)
	if !errors.Is(err, ErrOutcomeUnknown) || !c.Transient || c.RetryAfter < 8*time.Second || c.RetryAfter > staleAfter {
		t.Fatalf("a mark 1 s old, stale after 10 s: %v, retry after %v; want an unknown outcome asking to wait about 9 s", err, c.RetryAfter)
	}
}

// A drone service that books and then answers 500 (it crashed after the
// booking, or a gateway lost its answer: 502, 504) may have acted: the
// call's outcome is unknown, its mark stays, and once the mark is stale
// the service is asked, so the drone is booked once. Before, a 500 was
// taken as "did not act": the mark was cleared, the retry called again,
// and the drone was booked twice.
func TestServerErrorLeavesTheOutcomeUnknown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for step marks to turn stale: make test runs it, -short does not")
	}
	for _, code := range []int{500, 502, 504} {
		ledger := NewLedger()
		sim := SimulatedNonIdempotent(SimConfig{}, ledger, nil)
		h := HTTPHandler(sim)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				h.ServeHTTP(httptest.NewRecorder(), r) // books...
				http.Error(w, "lost the answer", code) // ...and fails
				return
			}
			h.ServeHTTP(w, r)
		}))
		cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
		store := NewRedisSteps(cl, time.Minute)
		b := HTTPBackends(srv.URL, NewHTTPClient(2))
		r := &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: time.Second,
			call: func(ctx context.Context, p *Progress) error {
				_, err := b.Drones.Schedule(ctx, p.Request.ID, p.Request.Pickup)
				return err
			},
			lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
				return b.Drones.Booking(ctx, p.Request.ID)
			}}
		id := "s" + strconv.Itoa(code)
		p := &Progress{Request: Request{ID: id, Pickup: Location{Lat: 1, Lon: 1}}}
		err := r.run(context.Background(), p)
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("HTTP %d after booking: %v, want ErrOutcomeUnknown", code, err)
		}
		time.Sleep(1100 * time.Millisecond) // the mark turns stale
		if err := r.run(context.Background(), p); err != nil {
			t.Errorf("HTTP %d: the retry once the mark is stale: %v", code, err)
		}
		if n := ledger.Created("drones", id); n != 1 {
			t.Errorf("HTTP %d after booking: drone booked %d times, want once", code, n)
		}
		srv.Close()
		store.Close()
		cl.Close()
	}
}

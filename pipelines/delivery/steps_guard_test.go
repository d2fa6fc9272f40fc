package delivery

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// holdPipelines is a redis hook that holds the client's first pipelines
// of step operations, one for each pair of channels: pipeline i closes
// held[i] and waits for release[i] to be closed before it is sent. It
// counts the step operations sent. (The pipelines a new connection sends
// to set itself up are let go.)
type holdPipelines struct {
	held, release []chan struct{}
	n             atomic.Int64 // pipelines seen
	cmds          atomic.Int64 // commands sent in them
}

func newHoldPipelines(n int) *holdPipelines {
	h := &holdPipelines{}
	for range n {
		h.held = append(h.held, make(chan struct{}))
		h.release = append(h.release, make(chan struct{}))
	}
	return h
}

func (h *holdPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch cmds[0].Name() {
		case "hello", "client", "auth", "select":
			return next(ctx, cmds)
		}
		if i := int(h.n.Add(1)) - 1; i < len(h.held) {
			close(h.held[i])
			<-h.release[i]
		}
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// heldStore returns a step store on a client whose first n pipelines of
// step operations are held; at the test's end they are let go, then the
// store closes (within its bound).
func heldStore(t *testing.T, n int) (*RedisSteps, *holdPipelines) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { cl.Close() })
	h := newHoldPipelines(n)
	cl.AddHook(h)
	s := NewRedisSteps(cl, time.Minute)
	t.Cleanup(func() { closeWithin(t, s) })
	t.Cleanup(h.releaseAll)
	return s, h
}

// releaseAll lets every pipeline held, or to be held, go (once).
func (h *holdPipelines) releaseAll() {
	for _, r := range h.release {
		select {
		case <-r:
		default:
			close(r)
		}
	}
}

// waitHeld waits for pipeline i to be held, at most 10 s.
func (h *holdPipelines) waitHeld(t *testing.T, i int) {
	t.Helper()
	select {
	case <-h.held[i]:
	case <-time.After(10 * time.Second):
		t.Fatalf("pipeline %d was not sent in 10 s", i)
	}
}

// An operation whose caller gives up while it is in flight in a batch
// that the batcher's goroutine sent (it was queued behind a round trip
// its caller sent) is answered later all the same, and that answer
// reaches no other operation: the next operation of its key, queued
// behind that batch, reads what the first one's command did. (The test
// this one follows gave up in flight in the batcher's only round trip;
// a caller that sends its own cannot give up, one in a batch still can.)
func TestGiveUpInABatchInFlightLeavesNoAnswerToAnother(t *testing.T) {
	s, h := heldStore(t, 2)
	if !s.direct {
		t.Fatal("a default client's callers do not send their own operations")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Sent by its caller, held: an Abandon of a mark the step does not
	// have (it changes nothing).
	sent := make(chan error, 1)
	go func() { sent <- s.Abandon(ctx, "batch", StepDrone, "nobody") }()
	h.waitHeld(t, 0)
	// Queued behind it, the key's Begin under m1, whose caller gives up
	// once its batch is in flight.
	gaveUp, giveUp := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := s.Begin(gaveUp, "batch", StepDrone, "m1")
		first <- err
	}()
	for !queuedOn(s, "batch", 1) {
		time.Sleep(time.Millisecond)
	}
	close(h.release[0])
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	h.waitHeld(t, 1) // the batch of m1's Begin
	giveUp()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Begin that gave up in flight: %v, want context.Canceled", err)
	}
	// Queued behind the batch in flight, whose answer to m1's Begin is
	// still to come.
	next := make(chan struct{})
	var st StepState
	var err error
	go func() {
		defer close(next)
		st, err = s.Begin(ctx, "batch", StepDrone, "m2")
	}()
	for !queuedOn(s, "batch", 1) {
		time.Sleep(time.Millisecond)
	}
	close(h.release[1])
	<-next
	if err != nil || st.StartedBy != "m1" {
		t.Fatalf("Begin after the one that gave up in flight: %+v %v, want started by m1 (its command ran)", st, err)
	}
}

// queuedOn reports whether n operations are queued on the batcher of
// id's drone step.
func queuedOn(s *RedisSteps, id string, n int) bool {
	b := s.batchers[maphash.String(s.seed, stepKey(id, StepDrone))%uint64(len(s.batchers))]
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queued) == n
}

// jitter is a redis hook that delays each pipeline by up to max, at
// random: round trips of uneven length, so that operations queue.
type jitter struct{ max time.Duration }

func (j jitter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (j jitter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (j jitter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(rand.N(j.max))
		return next(ctx, cmds)
	}
}

// takenThenGiveUp is a context whose first Err says it has not ended,
// whatever its deadline: do's check on entry lets the operation in (sent
// or queued), so that it lands for sure, and its caller gives up only
// while it waits for it.
type takenThenGiveUp struct {
	context.Context
	checked atomic.Bool
}

func (c *takenThenGiveUp) Err() error {
	if c.checked.CompareAndSwap(false, true) {
		return nil
	}
	return c.Context.Err()
}

// Each key's operations land in the order they came, those whose callers
// gave up waiting included, whether callers send their own operations or
// hand them all to the batchers: many callers, round trips of uneven
// length, and on each key in turn a record whose caller gives up after
// 50 µs to 2 ms and a Begin waited for, which must read that record.
func TestStepsKeepEachKeysOrderUnderGiveUps(t *testing.T) {
	addr := testenv.Redis(t)
	for _, c := range []struct {
		name   string
		opt    redis.Options
		direct bool
	}{
		{"callers send their own", redis.Options{Addr: addr}, true},
		{"batchers send all", redis.Options{Addr: addr, ReadTimeout: -1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := redis.NewClient(&c.opt)
			defer cl.Close()
			cl.AddHook(jitter{max: time.Millisecond})
			s := NewRedisSteps(cl, time.Minute)
			defer closeWithin(t, s)
			if s.direct != c.direct {
				t.Fatalf("callers send their own: %v, want %v", s.direct, c.direct)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var gaveUp, answered atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					rnd := rand.New(rand.NewPCG(uint64(g), 11))
					id := fmt.Sprintf("order-%v-%d", c.direct, g)
					for round := range 30 {
						short, stop := context.WithTimeout(ctx, time.Duration(50+rnd.IntN(2000))*time.Microsecond)
						value := fmt.Sprint("v", round)
						err := s.Record(&takenThenGiveUp{Context: short}, id, StepDrone, value)
						stop()
						switch {
						case err == nil:
							answered.Add(1)
						case errors.Is(err, context.DeadlineExceeded):
							gaveUp.Add(1)
						default:
							t.Errorf("%s: %v", id, err)
							return
						}
						st, err := s.Begin(ctx, id, StepDrone, "m")
						if err != nil || !st.Done || st.Value != value {
							t.Errorf("%s, round %d: %+v %v, want done with %s (the record before it landed after it, or not at all)",
								id, round, st, err, value)
							return
						}
					}
				})
			}
			wg.Wait()
			t.Logf("records answered: %d, given up: %d", answered.Load(), gaveUp.Load())
		})
	}
}

// A Begin that its caller sent, held in its round trip until the
// attempt's context ended and StaleAfter/4 went by: Begin answers (the
// mark is this copy's), and the recorded step calls nothing, since the
// mark may have been written as soon as Begin was sent and the call would
// not have a quarter of StaleAfter left by that reckoning; its retry finds
// its own mark, aged from its write on the store's clock, and books the
// drone once.
func TestBeginAnsweredAfterItsAttemptCallsNothing(t *testing.T) {
	s, h := heldStore(t, 1)
	const staleAfter = 2 * time.Second
	d := &fakeDrone{acted: true, booked: map[string]bool{}}
	r := &recordedStep{store: s, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, call: d.call,
		lookup: d.lookup, staleAfter: staleAfter}
	p := &Progress{Request: Request{ID: "late-begin"}}
	attempt, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- r.run(attempt, p) }()
	h.waitHeld(t, 0)
	time.Sleep(staleAfter/4 + 100*time.Millisecond)
	close(h.release[0])
	var err error
	select {
	case err = <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded step did not end 10 s after its Begin was answered")
	}
	if c := stream.Classify(err); !c.NotCalled || !c.Transient || d.calls != 0 {
		t.Fatalf("Begin answered after its attempt and StaleAfter/4: %v, %+v, %d calls; want a transient error, not called", err, c, d.calls)
	}
	if v, err := s.cl.Get(context.Background(), stepKey("late-begin", StepDrone)).Result(); err != nil || v != "s:"+p.mark {
		t.Fatalf("the record after the late Begin: %q %v, want this copy's mark %q", v, err, p.mark)
	}
	if err := r.run(context.Background(), p); err != nil || d.calls != 1 {
		t.Fatalf("the retry: %v, %d calls; want the drone booked once", err, d.calls)
	}
	st, err := s.Begin(context.Background(), "late-begin", StepDrone, "another")
	if err != nil || !st.Done || st.Value != "drone-late-begin" {
		t.Fatalf("after the retry: %+v %v, want the booking recorded", st, err)
	}
}

// Close with a round trip its caller sent in flight, an operation queued
// behind it and operations arriving: the queued one and those arriving
// fail with the store's closed error without reaching Redis, Close waits
// for the round trip in flight, and that one's caller gets its answer.
func TestCloseWaitsForTheRoundTripItsCallerSent(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	h := newHoldPipelines(1)
	cl.AddHook(h)
	s := NewRedisSteps(cl, time.Minute)
	defer h.releaseAll()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sent := make(chan error, 1)
	go func() {
		_, err := s.Begin(ctx, "closing", StepDrone, "m1")
		sent <- err
	}()
	h.waitHeld(t, 0)
	queued := make(chan error, 1)
	go func() { queued <- s.Abandon(ctx, "closing", StepDrone, "m1") }()
	for !queuedOn(s, "closing", 1) {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	if err := <-queued; !errors.Is(err, errStepsClosed) {
		t.Fatalf("the Abandon queued when the store closed: %v, want the closed error", err)
	}
	for i := range 16 {
		err := s.Record(ctx, fmt.Sprint("closing-", i), StepDrone, "drone")
		if !errors.Is(err, errStepsClosed) {
			t.Fatalf("a Record after Close began: %v, want the closed error", err)
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a round trip sent by its caller was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(h.release[0])
	if err := <-sent; err != nil {
		t.Fatalf("the Begin in flight when the store closed: %v, want its answer", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return 10 s after the round trip in flight ended")
	}
	if v, err := cl.Get(ctx, stepKey("closing", StepDrone)).Result(); err != nil || v != "s:m1" {
		t.Fatalf("the record: %q %v, want m1's mark (the queued Abandon never sent)", v, err)
	}
	if n := h.cmds.Load(); n != 1 {
		t.Fatalf("%d commands reached Redis, want 1: the Begin in flight", n)
	}
}

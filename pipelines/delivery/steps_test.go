package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// Concurrent operations through the batcher land in Redis, each answered
// with its own result: a step starts once, a second Begin sees who started
// it, a record is seen as done, an abandoned step can start again.
func TestRedisStepsBatches(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			id := fmt.Sprintf("r-%d", i)
			check := func(what string, step delivery.Step, mark string, want delivery.StepState) bool {
				got, err := s.Begin(ctx, id, step, mark)
				if err == nil && got.StartedBy != "" && (got.Age < 0 || got.Age > time.Minute) {
					t.Errorf("%s %s: started %v ago", id, what, got.Age)
				}
				if err != nil || got.Done != want.Done || got.Value != want.Value || got.StartedBy != want.StartedBy {
					t.Errorf("%s %s: got %+v %v, want %+v", id, what, got, err, want)
					return false
				}
				return true
			}
			if !check("fresh", delivery.StepDrone, "a", delivery.StepState{}) ||
				!check("started", delivery.StepDrone, "b", delivery.StepState{StartedBy: "a"}) {
				return
			}
			if err := s.Record(ctx, id, delivery.StepDrone, "drone-"+id); err != nil {
				t.Error(err)
				return
			}
			if !check("done", delivery.StepDrone, "b", delivery.StepState{Done: true, Value: "drone-" + id}) ||
				!check("fresh", delivery.StepPackage, "a", delivery.StepState{}) {
				return
			}
			// Abandoning is for the starter's copy alone: another copy's
			// abandon (a late one, after a take-over) leaves the mark.
			if err := s.Abandon(ctx, id, delivery.StepPackage, "b"); err != nil {
				t.Error(err)
				return
			}
			if !check("abandoned by another copy", delivery.StepPackage, "c", delivery.StepState{StartedBy: "a"}) {
				return
			}
			if err := s.Abandon(ctx, id, delivery.StepPackage, "a"); err != nil {
				t.Error(err)
				return
			}
			check("abandoned", delivery.StepPackage, "c", delivery.StepState{})
		})
	}
	wg.Wait()
	if ttl := cl.TTL(ctx, "sluice:steps:r-7:schedule_drone").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("ttl %v", ttl)
	}
}

// CheckRedis accepts a real redis-server and names an unreachable one.
func TestCheckRedis(t *testing.T) {
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	if err := delivery.CheckRedis(ctx, cl); err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	if err := delivery.CheckRedis(ctx, down); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("unreachable: %v", err)
	}
}

// An unreachable Redis is an error naming the request, not a hang.
func TestRedisStepsUnreachable(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Begin(ctx, "d-1", delivery.StepDrone, "m")
	if err == nil || !strings.Contains(err.Error(), "d-1") {
		t.Fatalf("got %v", err)
	}
}

// holdFirstPipeline is a redis hook that holds the client's first
// pipeline until release is closed, after closing held.
type holdFirstPipeline struct {
	once          sync.Once
	held, release chan struct{}
}

func (h *holdFirstPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdFirstPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// heldFirstStore returns a step store on a client whose first pipeline
// is held, and the function that lets it go, called at the latest when
// the test ends (before the store closes: Close waits for it).
func heldFirstStore(t *testing.T) (*delivery.RedisSteps, *holdFirstPipeline, func()) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { cl.Close() })
	h := &holdFirstPipeline{held: make(chan struct{}), release: make(chan struct{})}
	cl.AddHook(h)
	s := delivery.NewRedisSteps(cl, time.Minute)
	t.Cleanup(s.Close)
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release)
	return s, h, release
}

// While one batch of step operations waits for its round trip, the
// operations of other requests are sent rather than queued behind it.
func TestRedisStepsSendsWhileABatchIsInFlight(t *testing.T) {
	s, h, release := heldFirstStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := beginHeld(t, s, h.held, ctx, ctx, "held", "m")
	// Sixteen other requests: some have their keys in another batcher.
	done := make(chan error, 16)
	for i := range 16 {
		go func() {
			_, err := s.Begin(ctx, fmt.Sprintf("other-%d", i), delivery.StepDrone, "m")
			done <- err
		}()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no step operation completed in 10 s while another batch was in flight")
	}
	release()
	for range 15 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// An operation asked of a closed step store fails at once, as Close
// promises, rather than waiting in the queue of a batcher that stopped
// until its caller gives up.
func TestRedisStepsFailsAfterClose(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	s.Close()
	for i := range 64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Abandon(ctx, fmt.Sprintf("closed-%d", i), delivery.StepDrone, "m")
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Abandon %d on a closed store: %v; want the store's closed error", i, err)
		}
	}
}

// An operation queued before Close, behind a batch in flight, fails or
// lands when the store closes; its caller does not wait on a batcher that
// stopped with it still queued.
func TestRedisStepsCloseAnswersQueuedOperations(t *testing.T) {
	addr := testenv.Redis(t)
	for i := range 16 {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		h := &holdFirstPipeline{held: make(chan struct{}), release: make(chan struct{})}
		cl.AddHook(h)
		s := delivery.NewRedisSteps(cl, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		id := fmt.Sprintf("queued-%d", i)
		first := make(chan error, 1)
		go func() {
			_, err := s.Begin(ctx, id, delivery.StepDrone, "a")
			first <- err
		}()
		<-h.held
		// The same key: the same batcher, whose batch is in flight.
		queued := make(chan error, 1)
		go func() { queued <- s.Abandon(ctx, id, delivery.StepDrone, "b") }()
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		// Close has begun once the store refuses an operation.
		for {
			probe, stop := context.WithCancel(context.Background())
			stop()
			if _, err := s.Begin(probe, "probe", delivery.StepDrone, "p"); err != nil && strings.Contains(err.Error(), "closed") {
				break
			}
		}
		close(h.release)
		<-first
		err := <-queued
		cancel()
		<-closed
		cl.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: an Abandon queued before Close waited until its caller gave up: %v", i, err)
		}
	}
}

// countCommands counts the commands a client sends, pipelined or not.
type countCommands struct {
	mu   sync.Mutex
	cmds map[string]int
}

func (c *countCommands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *countCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}
func (c *countCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *countCommands) add(cmd redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds[strings.ToLower(cmd.Name())]++
}

// A step begun afresh, the way nearly every request begins it, costs one
// command: the age of a mark (PTTL) is only read when Begin finds one.
// A mark found still has its age.
func TestRedisStepsBeginFreshIsOneCommand(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	count := &countCommands{cmds: map[string]int{}}
	cl.AddHook(count)
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx := context.Background()
	for i := range 100 {
		if got, err := s.Begin(ctx, fmt.Sprintf("fresh-%d", i), delivery.StepDrone, "a"); err != nil || got != (delivery.StepState{}) {
			t.Fatalf("fresh step: %+v %v", got, err)
		}
	}
	count.mu.Lock()
	if count.cmds["set"] != 100 || count.cmds["pttl"] != 0 {
		t.Errorf("100 fresh Begins sent %v, want 100 SETs and no PTTL", count.cmds)
	}
	count.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // the mark ages on Redis's clock
	got, err := s.Begin(ctx, "fresh-7", delivery.StepDrone, "b")
	if err != nil || got.StartedBy != "a" || got.Age < 10*time.Millisecond || got.Age > time.Minute {
		t.Fatalf("a started step: %+v %v, want started by a some 20 ms ago", got, err)
	}
}

// An operation that gave up waiting behind the round trip in flight (its
// context ended while it was queued) is sent and answered later all the
// same, before the next operation of its key: an Abandon whose caller gave
// up still removes its mark before the next Begin of the step reads it.
// Its answer reaches no other operation: those after it, of the same key
// and so of the same batcher, each get their own.
func TestRedisStepsLateAnswerReachesNoOtherOperation(t *testing.T) {
	s, h, release := heldFirstStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// In flight, held: the step's mark m1 (its batcher had nothing in
	// flight, so its caller sends it).
	first := beginHeld(t, s, h.held, ctx, ctx, "late", "m1")
	// Queued behind it: m1's Abandon, whose caller gives up.
	gaveUp, giveUp := context.WithCancel(ctx)
	abandoned := make(chan error, 1)
	go func() { abandoned <- s.Abandon(gaveUp, "late", delivery.StepDrone, "m1") }()
	time.Sleep(50 * time.Millisecond) // queued (it cannot be sent while m1's Begin is held)
	giveUp()
	select {
	case err := <-abandoned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the queued Abandon whose caller gave up: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a queued Abandon whose caller gave up still waited 10 s later")
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The Abandon was sent after m1's Begin and before this Begin: the
	// step has no record.
	st, err := s.Begin(ctx, "late", delivery.StepDrone, "m2")
	if err != nil || st != (delivery.StepState{}) {
		t.Fatalf("Begin after the abandoned mark: %+v %v, want no record (the Abandon whose caller gave up landed first)", st, err)
	}
	if err := s.Record(ctx, "late", delivery.StepDrone, "drone-9"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		st, err := s.Begin(ctx, "late", delivery.StepDrone, fmt.Sprintf("m-%d", i))
		if err != nil || !st.Done || st.Value != "drone-9" {
			t.Fatalf("Begin %d after the record: %+v %v", i, st, err)
		}
	}
}

// A caller that sends its own operation (nothing was in flight on its
// batcher) waits for the round trip and returns its command's answer,
// even if its context ended meanwhile: the mark it wrote is its own, and
// it says so.
func TestRedisStepsSentOperationReturnsItsAnswer(t *testing.T) {
	s, h, release := heldFirstStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gaveUp, giveUp := context.WithCancel(ctx)
	first := beginHeld(t, s, h.held, ctx, gaveUp, "sent", "m1")
	giveUp()
	release()
	if err := <-first; err != nil {
		t.Fatalf("a Begin sent by its caller, whose context ended in flight: %v, want its answer (no record)", err)
	}
	st, err := s.Begin(ctx, "sent", delivery.StepDrone, "m2")
	if err != nil || st.StartedBy != "m1" {
		t.Fatalf("Begin after: %+v %v, want started by m1", st, err)
	}
}

// beginHeld starts a Begin of id's drone step with mark, under begin, and
// waits (at most until ctx ends) for its pipeline to be held; it returns
// the Begin's outcome to come.
func beginHeld(t *testing.T, s *delivery.RedisSteps, held <-chan struct{}, ctx, begin context.Context, id, mark string) <-chan error {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		_, err := s.Begin(begin, id, delivery.StepDrone, mark)
		first <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first Begin sent no pipeline")
	}
	return first
}

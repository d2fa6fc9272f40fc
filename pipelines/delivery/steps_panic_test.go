package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// panicOnce is a redis hook (an instrumentation's, say) that panics in
// the client's first pipeline, before it is sent.
type panicOnce struct{ once sync.Once }

func (h *panicOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *panicOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *panicOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.once.Do(func() { panic("hook failed") })
		return next(ctx, cmds)
	}
}

// A panic in the round trip that a caller sends itself (in a hook of the
// client) reaches that caller — MapAsync recovers it and fails that one
// request — and leaves its batcher free: the next operations of its keys
// are sent, and Close returns. Found in review: the batcher stayed busy
// for good, every later operation of a quarter of the keys waited in its
// queue until its caller gave up, and Close (waiting for the panicked
// round trip) never returned, so the worker could not stop.
func TestPanicInASentRoundTripLeavesItsBatcherFree(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	cl.AddHook(&panicOnce{})
	s := NewRedisSteps(cl, time.Minute)
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		_, _ = s.Begin(context.Background(), "panic", StepDrone, "m1")
	}()
	if panicked == nil {
		t.Fatal("the hook's panic did not reach the caller that sent the round trip")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.Begin(ctx, "panic", StepDrone, "m2")
	if err != nil || st != (StepState{}) {
		closeWithin(t, s)
		t.Fatalf("the next Begin of the key, after a panic in its batcher's round trip: %+v %v, want no record", st, err)
	}
	closeWithin(t, s)
}

package delivery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// While every batcher's round trip is held (a Redis that does not
// answer), the operations queued behind them are bounded: beyond
// maxQueued a batcher refuses more at once with a transient error (the
// recorded step waits for the store, as when Redis refuses) instead of
// queueing them without end, each to land in Redis when it answers. The
// operations queued are answered once the round trips end.
func TestStepOperationsQueuedBehindARoundTripAreBounded(t *testing.T) {
	s, h := heldStore(t, stepBatchers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	var refused, answered atomic.Int64
	var bad atomic.Value
	begin := func(id string) {
		_, err := s.Begin(ctx, id, StepDrone, "m")
		switch {
		case err == nil:
			answered.Add(1)
		case strings.Contains(err.Error(), "already wait behind a round trip") && stream.Classify(err).Transient:
			refused.Add(1)
		default:
			bad.CompareAndSwap(nil, err)
		}
	}
	// Hold every batcher: a key at a time until each has a round trip held.
	for i := 0; h.n.Load() < stepBatchers; i++ {
		if i > 10_000 {
			t.Fatalf("only %d of the %d batchers got a round trip", h.n.Load(), stepBatchers)
		}
		wg.Go(func() { begin(fmt.Sprintf("hold-%d", i)) })
		time.Sleep(time.Millisecond)
	}
	const n = 6 * maxQueued
	for i := range n {
		wg.Go(func() { begin(fmt.Sprintf("queued-%d", i)) })
	}
	limit := time.Now().Add(20 * time.Second)
	for refused.Load() < n-stepBatchers*maxQueued && time.Now().Before(limit) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := refused.Load(); got < n-stepBatchers*maxQueued {
		t.Fatalf("%d of %d operations refused while every batcher's round trip was held, want at least %d (at most %d queued a batcher)",
			got, n, n-stepBatchers*maxQueued, maxQueued)
	}
	h.releaseAll()
	wg.Wait()
	if err, _ := bad.Load().(error); err != nil {
		t.Fatal(err)
	}
	t.Logf("refused %d, answered %d", refused.Load(), answered.Load())
}

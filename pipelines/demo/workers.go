package demo

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// deadLettered counts what reached the dead letters.
func deadLettered(sch *delivery.Scheduler) int {
	for _, s := range sch.Graph.Stats() {
		if s.Name == "dead-letters" {
			return int(s.In)
		}
	}
	return 0
}

// incarnation is one life of the scheduler and the supervisor.
type incarnation struct {
	sch                    *delivery.Scheduler
	sup                    *stream.Graph
	src, supSrc, replaySrc *kafka.Source
	parkedSrc              *kafka.Source // the scheduler's replays
	stop                   context.CancelFunc
	done                   chan struct{}
	crashed                atomic.Bool
}

// shutdown stops both pipelines: a crash stops them without a drain (their
// errors are expected then); otherwise they drain.
func (inc *incarnation) shutdown(crash bool) {
	inc.crashed.Store(crash)
	inc.stop()
	<-inc.done
	inc.src.Close(context.Background())
	inc.supSrc.Close(context.Background())
	inc.replaySrc.Close(context.Background())
	inc.parkedSrc.Close(context.Background())
}

// workers holds the current incarnation and what earlier ones
// dead-lettered.
type workers struct {
	mu       sync.Mutex
	cur      *incarnation
	deadBase int
}

func (w *workers) set(inc *incarnation) {
	w.mu.Lock()
	if w.cur != nil {
		w.deadBase += deadLettered(w.cur.sch)
	}
	w.cur = inc
	w.mu.Unlock()
}

func (w *workers) current() *incarnation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *workers) deadLettered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadBase + deadLettered(w.cur.sch)
}

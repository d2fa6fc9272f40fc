package flow

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers runs the calls of an async stage. It grows on demand up to the
// stage's parallelism and never shrinks while the stage runs.
//
// A worker takes jobs in chunks sized so that a chunk lasts about
// chunkBudget at the recent average call duration: slow calls go one at a
// time to whichever worker is free (so one slow call holds back no other),
// while calls much shorter than a goroutine wake-up are run several per
// wake-up, which is what lets a stage of no-op calls move millions of
// messages a second.
type workers[In, Out any] struct {
	r   *asyncRun[In, Out]
	max int

	mu      sync.Mutex
	cond    *sync.Cond
	q       fifo[*asyncJob[In, Out]]
	idle    int
	running int
	closed  bool
	avg     float64 // EWMA of call duration in ns; 0 until measured
	wg      sync.WaitGroup

	fastAvg atomic.Bool // avg is below inlineBelow: the stage may run calls itself
}

// inlineBelow is the average call duration under which the stage runs
// calls on its own goroutine instead of handing them to workers: below it,
// the hand-off costs more than the call.
const inlineBelow = 2 * time.Microsecond

// observe folds a measured chunk into the average call duration. Called
// with mu held.
func (w *workers[In, Out]) observe(ns float64, n int) {
	if n == 0 {
		return
	}
	per := ns / float64(n)
	if w.avg == 0 {
		w.avg = per
	} else {
		w.avg += (per - w.avg) / 8
	}
	w.fastAvg.Store(w.avg < float64(inlineBelow))
}

// chunkBudget is the time a chunk of calls should take: about the cost of
// waking a parked goroutine, so that waking a worker never costs more than
// the calls it then runs.
const chunkBudget = 10 * time.Microsecond

func newWorkers[In, Out any](r *asyncRun[In, Out], max int) *workers[In, Out] {
	w := &workers[In, Out]{r: r, max: max}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// wake makes sure the queued jobs have workers: it wakes an idle one or
// starts new ones. Called with mu held.
func (w *workers[In, Out]) wake() {
	if w.idle > 0 {
		w.cond.Signal()
		return
	}
	// Start as many workers as there are jobs no worker will take soon,
	// within the parallelism.
	want := min(w.q.len(), w.max-w.running)
	if w.avg > 0 {
		want = min(want, max(1, int(float64(w.q.len())*w.avg/float64(chunkBudget))))
	}
	for range want {
		w.running++
		w.wg.Add(1)
		go w.work()
	}
}

func (w *workers[In, Out]) chunk() int {
	n := w.q.len()
	if w.avg <= 0 {
		return 1 // nothing measured yet: assume slow calls
	}
	return max(1, min(n, int(float64(chunkBudget)/w.avg)))
}

func (w *workers[In, Out]) work() {
	defer w.wg.Done()
	timed := w.r.a.o.limiter != nil || w.r.onCall != nil
	var batch []*asyncJob[In, Out]
	var lastNs float64
	var lastN int
	var counts callCounts
	defer counts.flush(w.r.a)
	for {
		w.mu.Lock()
		w.observe(lastNs, lastN)
		for w.q.len() == 0 && !w.closed {
			w.idle++
			w.cond.Wait()
			w.idle--
		}
		if w.q.len() == 0 { // closed and drained
			w.mu.Unlock()
			return
		}
		k := w.chunk()
		batch = batch[:0]
		for range k {
			batch = append(batch, w.q.pop())
		}
		if w.q.len() > 0 && w.idle > 0 {
			w.cond.Signal()
		}
		w.mu.Unlock()

		t0 := time.Now()
		t := w.r.callChunk(batch, timed, &counts, t0)
		counts.flush(w.r.a)
		lastNs, lastN = float64(t.Sub(t0)), len(batch)
		w.r.finished(batch)
	}
}

// close lets the workers finish the queued jobs and waits for them.
func (w *workers[In, Out]) close() {
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	w.wg.Wait()
}

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
//
// The stage hands the pool every job ready to call, and the pool keeps
// the calls running within the stage's limit (active). A worker whose
// call returns takes the next job at once: the stage's window holds more
// messages than the parallelism, so with slow calls there is nearly
// always one queued, and no worker parks between calls waiting for the
// stage to hand it one (a park and a wake-up per call, which were half
// the stage's CPU over the calls' own).
//
// An idle worker woken for a job is the one that went idle last: with the
// pool grown for a burst and the limit lower since, the same few workers
// take the calls, with their stacks grown and in cache, while the others
// stay parked. Woken in the order they parked, every worker took calls in
// turn, each after long enough parked for the garbage collector to shrink
// its stack, which its next call grew again: a saturated scheduler of
// five HTTP steps (about 800 workers each, 100 to 300 calls running)
// spent 7.5% of its CPU copying stacks.
type workers[In, Out any] struct {
	r   *asyncRun[In, Out]
	max int

	mu      sync.Mutex
	parked  []chan struct{} // the idle workers' wake-ups, the last parked last
	q       fifo[*asyncJob[In, Out]]
	idle    int
	running int
	active  int          // calls taken by workers and not yet returned
	activeN atomic.Int64 // active, for the stage's statistics
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

// sampledAbove is the average call duration above which a stage that needs
// no call's times measures one chunk in sampleEvery.
const (
	sampledAbove = 50 * time.Microsecond
	sampleEvery  = 8
)

// chunkBudget is the time a chunk of calls should take: about the cost of
// waking a parked goroutine, so that waking a worker never costs more than
// the calls it then runs.
const chunkBudget = 10 * time.Microsecond

func newWorkers[In, Out any](r *asyncRun[In, Out], max int) *workers[In, Out] {
	return &workers[In, Out]{r: r, max: max}
}

// signal wakes the idle worker that parked last, if one is parked.
// Called with mu held.
func (w *workers[In, Out]) signal() {
	n := len(w.parked)
	if n == 0 {
		return
	}
	ch := w.parked[n-1]
	w.parked[n-1] = nil
	w.parked = w.parked[:n-1]
	ch <- struct{}{} // buffered, and empty while the worker is parked
}

// park waits, mu held on entry and on return, until signal or close
// wakes the worker whose wake-up ch is.
func (w *workers[In, Out]) park(ch chan struct{}) {
	w.idle++
	w.parked = append(w.parked, ch)
	w.mu.Unlock()
	<-ch
	w.mu.Lock()
	w.idle--
}

// limit is how many calls may run: the stage's current limit (its
// limiter's, or the parallelism), read now rather than as the stage last
// saw it. A limiter changes its limit in Observe, on the worker that is
// about to take its next job: with the stage's copy (a.limit, updated
// when the stage runs again) workers went on starting calls under a
// limit one or more changes old.
func (w *workers[In, Out]) limit() int {
	if w.r.a.o.limiter == nil {
		return w.max
	}
	return min(w.max, max(1, w.limiterLimit()))
}

// limiterLimit is the limiter's limit now, or, should its Limit panic (on
// a worker, where nothing would recover it), the one the stage last read:
// the stage's own call of Limit then fails the stage.
func (w *workers[In, Out]) limiterLimit() (l int) {
	defer func() {
		if recover() != nil {
			l = int(w.r.a.limit.Load())
		}
	}()
	return w.r.a.o.limiter.Limit()
}

// wake makes sure the queued jobs that may run have workers: it wakes an
// idle one (which wakes the next, see work) and starts new ones for the
// rest. Called with mu held.
func (w *workers[In, Out]) wake() {
	if w.closed {
		return // every worker is awake, draining the queue (close)
	}
	need := min(w.q.len(), w.limit()-w.active)
	if need <= 0 {
		return // the workers of the running calls take them as they return
	}
	if w.idle > 0 {
		w.signal()
		need -= w.idle
	}
	// Start as many workers as there are jobs no worker will take soon,
	// within the parallelism.
	want := min(need, w.max-w.running)
	if w.avg > 0 && want > 0 {
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
	timed := w.r.a.o.limiter != nil || w.r.onCall != nil || w.r.a.adaptive != nil
	var batch []*asyncJob[In, Out]
	var lastNs float64
	var lastN, taken int
	var measured int
	var counts callCounts
	defer counts.flush(w.r.a)
	wake := make(chan struct{}, 1)
	for {
		w.mu.Lock()
		w.observe(lastNs, lastN)
		if taken > 0 {
			w.active -= taken
			taken = 0
			w.activeN.Store(int64(w.active)) // an idle pool reports no call running
		}
		for (w.q.len() == 0 || w.active >= w.limit()) && !w.closed {
			w.park(wake)
		}
		if w.q.len() == 0 { // closed and drained
			w.activeN.Store(int64(w.active))
			w.mu.Unlock()
			return
		}
		k := w.chunk()
		if room := w.limit() - w.active; room > 0 { // closed: the queue is drained whatever the limit
			k = min(k, room)
		}
		// A stage that needs no call's times measures one chunk in
		// sampleEvery of slow calls (two clock reads per call were a tenth
		// of its CPU), every chunk of fast ones (their average decides
		// the chunks and whether the stage runs calls itself).
		measured++
		measure := w.r.clocked || w.avg < float64(sampledAbove) || measured%sampleEvery == 0
		batch = batch[:0]
		for range k {
			j := w.q.pop()
			w.active++
			j.inFlight = w.active
			batch = append(batch, j)
		}
		taken = k
		w.activeN.Store(int64(w.active))
		if w.q.len() > 0 {
			// Room for more (the limit may have risen since the stage
			// last looked, unseen by it): wake or start their workers.
			w.wake()
		}
		w.mu.Unlock()

		if err := w.r.callsCtx.Err(); err != nil {
			// The stage is stopping: the queued jobs are not called (a call
			// would get a cancelled context); cut, their messages stay
			// unsettled and are replayed.
			for _, j := range batch {
				j.err = err
			}
			lastNs, lastN = 0, 0
			w.r.finished(batch)
			continue
		}

		var t0, until time.Time
		if measure {
			t0 = time.Now()
			until = t0.Add(2 * chunkBudget)
		}
		made, t := w.r.callChunk(batch, timed, &counts, t0, until)
		counts.flush(w.r.a)
		lastNs, lastN = 0, 0
		if measure {
			lastNs, lastN = float64(t.Sub(t0)), made
		}
		if made < len(batch) {
			// The calls turned slow: the rest of the chunk goes back to
			// the queue for idle workers, under the average that says so.
			w.giveBack(batch[made:], lastNs, lastN)
			lastNs, lastN = 0, 0
			taken = made
		}
		w.r.finished(batch[:made])
	}
}

// giveBack returns jobs a worker took and did not call to the front of
// the queue, folding in the chunk it measured first, so that they are
// taken one at a time and by other workers.
func (w *workers[In, Out]) giveBack(js []*asyncJob[In, Out], ns float64, n int) {
	w.mu.Lock()
	w.observe(ns, n)
	w.q.unpop(js)
	w.active -= len(js)
	w.activeN.Store(int64(w.active))
	w.wake()
	w.mu.Unlock()
}

// close lets the workers finish the queued jobs and waits for them.
func (w *workers[In, Out]) close() {
	w.mu.Lock()
	w.closed = true
	for len(w.parked) > 0 {
		w.signal()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

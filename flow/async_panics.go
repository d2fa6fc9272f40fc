package flow

import (
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// A panic in user code that MapAsync runs for one message fails that
// message with a *stream.PanicError, and the stage goes on: the key
// function (on the stage goroutine, before the message joins a key group),
// the call itself (safeCall), the classifier, the breaker's OnStateChange,
// the limiter's Observe and OnCall (on the goroutine that ran the call, a
// worker's or the stage's), OnRetry, the retry logger and OnDone (on the
// stage goroutine). A panic on a worker goroutine would otherwise end the
// process. Each loop recovers once per panic and resumes past the message,
// rather than deferring per message: the loops run once per message.

// acceptFrom takes the messages of *cur from *idx into the stage while the
// window has room, releasing the batch once it took all of it.
func (r *asyncRun[In, Out]) acceptFrom(cur **stream.Batch[In], idx *int) error {
	for *cur != nil && r.held < r.a.o.window {
		if err := r.acceptSome(cur, idx); err != nil {
			return err
		}
	}
	return nil
}

func (r *asyncRun[In, Out]) acceptSome(cur **stream.Batch[In], idx *int) (err error) {
	b := *cur
	defer func() {
		if p := recover(); p != nil {
			// The key function, SkipCall's or ServeFirst's panicked:
			// accept changed nothing yet.
			err = r.in.Fail(r.ctx, b.Items[*idx], stream.NewPanicError(p))
			r.taken(cur, idx)
		}
	}()
	if r.lanes != nil {
		r.lanes.tick()
	}
	for *cur != nil && r.held < r.a.o.window {
		m := &b.Items[*idx]
		if r.lanes != nil && int(m.Priority) >= len(r.lanes.q) {
			// Never served as high, nor as any level it is not.
			err := r.in.Fail(r.ctx, *m, fmt.Errorf("%w: level %d, the stage's lanes have %d", ErrPriorityOutOfRange, m.Priority, len(r.lanes.q)))
			r.taken(cur, idx)
			if err != nil {
				return err
			}
			continue
		}
		r.accept(m)
		r.taken(cur, idx)
	}
	return nil
}

// taken moves past the message at *idx, releasing the batch after its last.
func (r *asyncRun[In, Out]) taken(cur **stream.Batch[In], idx *int) {
	if *idx++; *idx == len((*cur).Items) {
		(*cur).Release()
		*cur = nil
	}
}

// callChunk makes one attempt of each job's call, one after the other,
// the first starting at t, and returns how many it made and when the last
// ended. It stops early, after the call that ends past until (if t and
// until are not zero): a chunk is sized for the calls' recent durations,
// and once they turn slow its other jobs must not wait behind them while
// other goroutines could run them (the caller hands them on).
func (r *asyncRun[In, Out]) callChunk(js []*asyncJob[In, Out], timed bool, counts *callCounts, t, until time.Time) (int, time.Time) {
	for i := 0; i < len(js); {
		i, t = r.callFrom(js, i, timed, counts, t, until)
		if !until.IsZero() && t.After(until) {
			return i, t
		}
	}
	return len(js), t
}

func (r *asyncRun[In, Out]) callFrom(js []*asyncJob[In, Out], i int, timed bool, counts *callCounts,
	t, until time.Time) (next int, end time.Time) {
	defer func() {
		if p := recover(); p != nil {
			r.callPanicked(js[i], p)
			next, end = i+1, time.Now()
		}
	}()
	for i < len(js) {
		t = r.call(js[i], timed, counts, t)
		i++
		if !until.IsZero() && t.After(until) {
			break
		}
	}
	return i, t
}

// callPanicked fails j, whose call ran but a callback reporting on it
// panicked (see call). If the classifier did, the breaker has not heard of
// the call yet: it hears a success, since the failure, if any, could not be
// classified as the dependency's.
func (r *asyncRun[In, Out]) callPanicked(j *asyncJob[In, Out], p any) {
	var zero Out
	j.out, j.err, j.class = zero, stream.NewPanicError(p), stream.Classification{}
	if done := j.breakerDone; done != nil {
		j.breakerDone = nil
		func() {
			defer func() { _ = recover() }() // its OnStateChange again: the message fails already
			done(backpressure.Succeeded)
		}()
	}
}

// completeFrom handles done[i:] (see completeJob), then emits what the
// reorder ring lets go, and returns len(done)+1. After a panic in OnRetry,
// the retry logger or OnDone it returns where to go on from.
func (r *asyncRun[In, Out]) completeFrom(done []*asyncJob[In, Out], i int) (next int, err error) {
	defer func() {
		if p := recover(); p != nil {
			next, err = r.completePanicked(done, i, p)
		}
	}()
	for ; i < len(done); i++ {
		if err := r.completeJob(done[i]); err != nil {
			return 0, err
		}
	}
	if r.ring != nil {
		if err := r.drainRing(); err != nil {
			return 0, err
		}
	}
	return len(done) + 1, nil
}

func (r *asyncRun[In, Out]) completePanicked(done []*asyncJob[In, Out], i int, p any) (next int, err error) {
	j := r.emitting
	if j == nil {
		if i == len(done) {
			panic(p) // not a user callback's: a bug of the stage, which ends the pipeline
		}
		// OnRetry or the logger, deciding on done[i]'s retry: handle it
		// again, failed for good.
		j = done[i]
		j.err, j.class = stream.NewPanicError(p), stream.Classification{}
		return i, nil
	}
	// OnDone, for a job already taken out of the stage (emit): hand it on
	// failed, and go on past it, or with the ring if it came from there.
	r.emitting = nil
	var zero Out
	j.out, j.err, j.class = zero, stream.NewPanicError(p), stream.Classification{}
	err = r.hand(j)
	r.free = append(r.free, j)
	if i < len(done) {
		i++
	}
	return i, err
}

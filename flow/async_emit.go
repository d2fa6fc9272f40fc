package flow

import (
	"errors"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// complete handles the calls that finished since last time and emits what
// may be emitted. It returns how many calls it handled.
func (r *asyncRun[In, Out]) complete() (int, error) {
	r.mu.Lock()
	done := r.doneQ
	r.doneQ = r.spare[:0]
	r.mu.Unlock()
	defer func() { r.spare = done[:0] }()
	r.inFlight -= len(done)
	if r.lanes != nil && len(done) > 0 {
		r.lanes.tick()
		for _, j := range done {
			r.lanes.finished(j)
		}
	}
	if n := len(r.skipping); n > 0 {
		// Answered by SkipCall, never called nor counted in flight: done
		// with the calls. A key one of them frees may let another such
		// job go (letGo), which the next round completes.
		r.a.skipped.Add(int64(n))
		done = append(done, r.skipping...)
		clear(r.skipping)
		r.skipping = r.skipping[:0]
	}
	// i == len(done): the jobs are handled, emit what the reorder ring
	// lets go. completeFrom returns past that when all is done.
	for i := 0; i <= len(done); {
		next, err := r.completeFrom(done, i)
		if err != nil {
			return 0, err
		}
		i = next
	}
	return len(done), r.flushSlots()
}

// completeJob handles a job whose call returned: it waits for its retry,
// or it frees its key and is emitted, now or, in order, when its turn
// comes. Handling a job whose OnRetry panicked again is safe: its error is
// then permanent, so it is not retried.
func (r *asyncRun[In, Out]) completeJob(j *asyncJob[In, Out]) error {
	if j.err != nil && r.retry(j) {
		return nil // waits in the delay queue, keeping its key and window place
	}
	if r.groups != nil {
		g := r.groups[j.key]
		if g.waiting.len() > 0 {
			r.letGo(g.waiting.pop())
		} else if g.running--; g.running == 0 {
			delete(r.groups, j.key)
			if len(r.freeGroups) < r.a.o.window {
				r.freeGroups = append(r.freeGroups, g) // empty: waiting is drained, running 0
			}
		}
	}
	if r.ring == nil {
		if err := r.emit(j); err != nil {
			return err
		}
		r.free = append(r.free, j)
		return nil
	}
	j.done = true
	return nil
}

// drainRing emits, in input order, the finished jobs at the head of the
// reorder ring.
func (r *asyncRun[In, Out]) drainRing() error {
	for {
		slot := &r.ring[r.head%int64(len(r.ring))]
		if *slot == nil || !(*slot).done {
			return nil
		}
		hj := *slot
		*slot = nil
		r.head++
		if err := r.emit(hj); err != nil {
			return err
		}
		r.free = append(r.free, hj)
	}
}

// emit hands a finished job on: its result to the output, its error to the
// failure stream, or, if the call was cut by the stage stopping, nowhere:
// the message stays unsettled and is replayed.
func (r *asyncRun[In, Out]) emit(j *asyncJob[In, Out]) error {
	r.held--
	if r.lanes != nil && !r.cut(j) {
		r.lanes.emitted(j)
	}
	j.msg.Attempt = int32(j.attempts)
	if r.onDone != nil && j.attempts > 0 {
		r.emitting = j // for completeFrom, should OnDone panic
		r.onDone(DoneInfo{Attempts: j.attempts, Total: time.Since(j.first), Err: j.err})
		r.emitting = nil
	}
	return r.hand(j)
}

// hand passes on the outcome of a job taken out of the stage (see emit).
func (r *asyncRun[In, Out]) hand(j *asyncJob[In, Out]) error {
	if j.span != nil {
		r.endSpan(j)
	}
	if j.err == nil {
		if len(r.slots) == 0 {
			var err error
			if r.slots, err = r.out.Free(r.ctx); err != nil {
				return err
			}
		}
		d := &r.slots[0]
		d.Value = j.out
		d.Envelope = j.msg.Envelope
		r.slots = r.slots[1:]
		r.filled++
		if len(r.slots) == 0 {
			return r.flushSlots()
		}
		return nil
	}
	if err := r.flushSlots(); err != nil { // keep results and failures in order
		return err
	}
	if r.cut(j) {
		return nil
	}
	return r.in.FailWith(r.ctx, j.msg, stream.Failure{Err: j.err, Attempts: j.attempts, FirstFailure: j.first,
		Transient: j.class.Transient, NotBefore: j.notBefore})
}

// endSpan ends j's span with its outcome.
func (r *asyncRun[In, Out]) endSpan(j *asyncJob[In, Out]) {
	span := j.span
	j.span = nil
	if r.cut(j) {
		span.AddEvent("stage stopped: message left unsettled, to be replayed")
		r.tracer.end(j, span, j.attempts, nil, false)
		return
	}
	r.tracer.end(j, span, j.attempts, j.err, j.class.Transient)
}

// cut reports whether j's call failed because the stage is stopping: it
// has no outcome, and its message stays unsettled to be replayed.
func (r *asyncRun[In, Out]) cut(j *asyncJob[In, Out]) bool {
	return j.err != nil && r.callsCtx.Err() != nil && !errors.Is(j.err, ErrCallTimeout)
}

// flushSlots adds the results written into free output slots to the
// output.
func (r *asyncRun[In, Out]) flushSlots() error {
	if r.filled == 0 {
		r.slots = nil
		return nil
	}
	k := r.filled
	r.slots, r.filled = nil, 0
	return r.out.Extend(r.ctx, k)
}

package flow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// call makes one attempt of j's call, starting at now (read by the
// caller, once for a chunk of calls run back to back), and returns when it
// ended: one clock read per call serves the retry budget's start, the
// attempt's deadline, the limiter's latency and the workers' average. A
// zero now (a stage that needs none of these, in a chunk not measured)
// skips the clock: the call's start is then unknown, and a failure's
// FirstFailure is when it failed.
// timed says whether to measure its latency on its own: from now, or from
// its send if it said it was sent (TimeoutFromSend).
func (r *asyncRun[In, Out]) call(j *asyncJob[In, Out], timed bool, counts *callCounts, now time.Time) (end time.Time) {
	a := r.a
	j.attempts++
	if j.attempts == 1 {
		j.first = now
		if a.o.budget != nil {
			a.o.budget.Request()
		}
	}
	j.err = nil
	var done func(backpressure.Outcome)
	if a.o.breaker != nil {
		var err error
		if done, err = a.o.breaker.AllowCall(); err != nil {
			// Refused: no call is made, the message fails fast, and its
			// retry waits for the breaker.
			counts.refused++
			j.err, j.class = err, r.classify(err)
			if j.span != nil {
				refusedEvent(j.span, j.attempts, err)
			}
			return now
		}
		j.breakerDone = done // for callPanicked, should the classifier panic
	}
	ctx := r.callsCtx
	var finish func() time.Time // ends the call's context; returns its send time
	if r.clock != nil {
		ctx, finish = r.clock.start(now, r.attemptLimit(j, now))
	}
	callCtx := ctx // ctx stays the clock's own, which timeoutOf reads
	if j.span != nil {
		callCtx = attemptContext(ctx, j.span, j.attempts)
	}
	j.out, j.err = safeCall(callCtx, a.fn, j.msg.Value)
	j.err = RedactURLError(j.err)
	timedOut := false
	// Cause rather than Err: a call timed from its send on the fallback
	// contexts is cancelled with the cause DeadlineExceeded (stdSent).
	if j.err != nil && r.clock != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) && r.callsCtx.Err() == nil {
		timedOut = true
		j.err = fmt.Errorf("%w after %v: %w", ErrCallTimeout, r.clock.timeoutOf(ctx), j.err)
	}
	var sent, answered time.Time // when the call said it was sent and answered, if it did (TimeoutFromSend)
	if finish != nil {
		sent = finish()
		if s, ok := ctx.(sender); ok && !sent.IsZero() {
			answered = s.answeredAt()
		}
	}
	counts.calls++
	if j.err != nil {
		counts.failed++
		if j.first.IsZero() {
			j.first = time.Now()
		}
	}
	if timedOut {
		counts.timeouts++
	}
	// From here on, user callbacks run: a panic in one is caught by
	// callFrom and fails the message (callPanicked).
	if j.err != nil {
		j.class = r.classify(j.err)
		if c := j.class; c.Reason == stream.ReasonThrottled && c.RetryAfter > 0 {
			if nb := time.Now().Add(c.RetryAfter); nb.After(j.notBefore) {
				j.notBefore = nb
			}
		}
	}
	if j.err != nil && j.span != nil {
		failedEvent(j.span, j.attempts, j.err, j.class)
	}
	// A call that says it failed before reaching the service (NotCalled)
	// tells nothing of the service: the breaker counts it neither way, and
	// its latency (a precondition checked, not the service's answer) is
	// kept from the limiter, the adaptive timeouts and the call histogram.
	notCalled := j.err != nil && (j.class.NotCalled || stream.IsNotCalled(j.err))
	if done != nil {
		j.breakerDone = nil
		switch {
		case notCalled:
			done(backpressure.NotReached)
		case j.err == nil || !j.class.Transient:
			done(backpressure.Succeeded)
		default:
			done(backpressure.Failed)
		}
	}
	if now.IsZero() {
		return now
	}
	end = time.Now()
	if !timed {
		return end
	}
	lat, wait := end.Sub(now), time.Duration(0)
	if !sent.IsZero() {
		lat, wait = end.Sub(sent), max(0, sent.Sub(now))
	}
	if a.adaptive != nil && !notCalled {
		// The timeout times the whole attempt: it learns from all of it.
		var limit time.Duration
		if timedOut {
			limit = r.clock.timeoutOf(ctx)
		}
		a.adaptive.observe(lat, limit)
	}
	if answered.After(sent) {
		// The service's latency: the rest of the attempt was the call's
		// own work on the answer (see Answered).
		lat = answered.Sub(sent)
	}
	if a.o.limiter != nil && !notCalled {
		a.o.limiter.Observe(backpressure.Sample{Latency: lat, InFlight: j.inFlight, Dropped: timedOut})
	}
	if r.onCall != nil {
		var traceID string
		if j.span != nil {
			traceID = sampledTraceID(j.span)
		}
		r.onCall(CallInfo{Latency: lat, Wait: wait, InFlight: j.inFlight, Err: j.err, NotCalled: notCalled, TraceID: traceID})
	}
	return end
}

// attemptLimit is the most an attempt of j starting at now may last with
// adaptive timeouts: what is left of its policy's MaxElapsed (negative
// once it is spent: the attempt then gets the least timeout); 0, no
// limit, otherwise, and with a MaxAttemptTimeout, which the timeout may
// grow to past the budget.
func (r *asyncRun[In, Out]) attemptLimit(j *asyncJob[In, Out], now time.Time) time.Duration {
	p := r.a.o.retry
	if r.a.adaptive == nil || p.MaxElapsed <= 0 || p.MaxAttemptTimeout > 0 || now.IsZero() {
		return 0
	}
	if left := p.MaxElapsed - now.Sub(j.first); left > 0 {
		return left
	}
	return -1
}

func (r *asyncRun[In, Out]) classify(err error) stream.Classification {
	if r.a.o.classify != nil {
		return r.a.o.classify(err)
	}
	if p := r.a.o.retry; p != nil {
		return p.Classify(err)
	}
	return stream.Classify(err)
}

// runInline runs up to n ready calls on the stage goroutine, one after the
// other: when calls take less than handing them to a worker would, this is
// the fastest way to run them. Their results are handled as if a worker had
// run them, and their durations keep the average current, so that once
// calls slow down the stage goes back to its workers: at once, handing
// them the calls it has not made yet, should one call take the batch past
// twice its expected time.
func (r *asyncRun[In, Out]) runInline(n, limit int) {
	timed := r.a.o.limiter != nil || r.onCall != nil || r.a.adaptive != nil
	batch := r.inline[:0]
	for range min(n, 256) {
		j := r.popReady(limit)
		r.inFlight++
		j.inFlight = r.inFlight
		batch = append(batch, j)
	}
	t0 := time.Now()
	until := t0.Add(2 * max(chunkBudget, time.Duration(len(batch))*inlineBelow))
	made, t := r.callChunk(batch, timed, &r.inlineCounts, t0, until)
	el := float64(t.Sub(t0))
	r.inlineCounts.flush(r.a)
	r.pool.mu.Lock()
	r.pool.observe(el, made)
	if rest := batch[made:]; len(rest) > 0 {
		for _, j := range rest {
			r.pool.q.push(j) // still counted in r.inFlight
		}
		r.pool.wake()
	}
	r.pool.mu.Unlock()
	r.finished(batch[:made])
	r.inline = batch[:0]
}

// finished hands jobs whose calls returned back to the stage goroutine.
func (r *asyncRun[In, Out]) finished(js []*asyncJob[In, Out]) {
	r.mu.Lock()
	r.doneQ = append(r.doneQ, js...)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func safeCall[In, Out any](ctx context.Context, fn func(context.Context, In) (Out, error), v In) (out Out, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = stream.NewPanicError(p)
		}
	}()
	return fn(ctx, v)
}

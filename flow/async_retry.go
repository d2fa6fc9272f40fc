package flow

import (
	"container/heap"
	"log/slog"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// retry decides whether a failed job is tried again and, if so, puts it in
// the delay queue. It reports whether it did.
func (r *asyncRun[In, Out]) retry(j *asyncJob[In, Out]) bool {
	p := r.a.o.retry
	if p == nil || !j.class.Transient || r.callsCtx.Err() != nil {
		return false
	}
	if j.attempts >= p.MaxAttempts {
		r.a.exhausted.Add(1)
		return false
	}
	// A wait a throttling service asked for (a 429's Retry-After) longer
	// than any wait of the policy does not fit the budget: an attempt in
	// place would come before the time asked, meet the same refusal and
	// spend the attempts. The retries end at once; the failure carries the
	// end of the wait (NotBefore, set for throttling answers only) for a
	// parking to replay the message then. Other answers with a Retry-After
	// (a 502, a 503, a breaker's next probe) are retried as the policy
	// says, the wait capped at MaxDelay.
	if ra := j.class.RetryAfter; p.HonorRetryAfter && j.class.Reason == stream.ReasonThrottled && ra > 0 &&
		p.MaxDelay > 0 && ra > p.MaxDelay {
		r.a.exhausted.Add(1)
		return false
	}
	now := time.Now()
	delay := p.Delay(j.attempts+1, j.lastDelay, j.class.RetryAfter, defaultRand)
	if p.MaxElapsed > 0 {
		// The next attempt must be able to finish within the budget,
		// after the wait the service asked for too.
		timeout := r.a.attemptTimeout()
		if now.Add(delay+timeout).Sub(j.first) > p.MaxElapsed {
			r.a.exhausted.Add(1)
			return false
		}
	}
	if b := r.a.o.budget; b != nil && !b.TryRetry() {
		r.a.noBudget.Add(1)
		return false
	}
	// A panic in OnRetry or in the logger's handler fails the message
	// (see completeFrom); the retry is counted only once they returned.
	if r.a.o.onRetry != nil {
		r.a.o.onRetry(RetryInfo{Attempt: j.attempts, Reason: j.class.Reason, Delay: delay, Err: j.err})
	}
	if r.log != nil {
		r.log.Log(r.ctx, slog.LevelWarn, string(j.class.Reason), "transient failure, retrying",
			slog.String("reason", string(j.class.Reason)), slog.Int("attempt", j.attempts),
			slog.Duration("wait", delay), slog.String("err", j.err.Error()))
	}
	if j.span != nil {
		retryEvent(j.span, j.attempts, j.class.Reason, delay)
	}
	r.a.retries[reasonIndex(j.class.Reason)].Add(1)
	j.lastDelay = delay
	j.due = now.Add(delay)
	heap.Push(&r.delayed, j)
	r.a.delayed.Store(int64(r.delayed.Len()))
	return true
}

// wakeDue moves the jobs whose wait is over to the ready queue (they kept
// their key's slot while waiting) and arms the timer for the next one.
func (r *asyncRun[In, Out]) wakeDue() {
	if r.delayed.Len() == 0 {
		return
	}
	now := time.Now()
	for r.delayed.Len() > 0 && !r.delayed.items[0].due.After(now) {
		r.pushReady(heap.Pop(&r.delayed).(*asyncJob[In, Out]))
	}
	r.a.delayed.Store(int64(r.delayed.Len()))
	if r.delayed.Len() == 0 {
		return
	}
	next := r.delayed.items[0].due
	if r.timer == nil {
		r.timer = time.NewTimer(time.Until(next))
	} else if !next.Equal(r.timerAt) {
		r.timer.Reset(time.Until(next))
	}
	r.timerAt = next
}

// timerC is the channel of the delay timer, or nil when nothing waits.
func (r *asyncRun[In, Out]) timerC() <-chan time.Time {
	if r.timer == nil || r.delayed.Len() == 0 {
		return nil
	}
	return r.timer.C
}

// delayQueue is a min-heap of jobs by due time.
type delayQueue[In, Out any] struct{ items []*asyncJob[In, Out] }

func (q *delayQueue[In, Out]) Len() int           { return len(q.items) }
func (q *delayQueue[In, Out]) Less(i, k int) bool { return q.items[i].due.Before(q.items[k].due) }
func (q *delayQueue[In, Out]) Swap(i, k int)      { q.items[i], q.items[k] = q.items[k], q.items[i] }
func (q *delayQueue[In, Out]) Push(x any)         { q.items = append(q.items, x.(*asyncJob[In, Out])) }
func (q *delayQueue[In, Out]) Pop() any {
	n := len(q.items)
	j := q.items[n-1]
	q.items[n-1] = nil
	q.items = q.items[:n-1]
	return j
}

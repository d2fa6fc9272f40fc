package flow

import (
	"context"
	"time"
)

// SentOnWriteWithin returns SentOnWrite(ctx) bounded to end d from now at
// the latest, and the function that releases it, as
//
//	ctx, cancel := context.WithTimeout(flow.SentOnWrite(ctx), d)
//
// does: the returned context ends with ctx, or at the bound with
// context.DeadlineExceeded, or when released. It is the bound of a whole
// HTTP call, a wait for a connection included, behind an attempt timed
// from its send, which has no deadline until then: the bound an
// http.Client's Timeout would give, without the two goroutines net/http
// watches such a client's requests with when its transport is one it does
// not know (a tracing wrapper is one).
//
// It costs less than WithTimeout: where ctx already ends by d from now
// (its deadline is earlier), it needs no bound and gets no timer; in a call
// of a stage with TimeoutFromSend, the stage's clock of attempt timeouts
// keeps the bounds too, rather than a timer each. Release it once the call
// returned, as a CancelFunc.
func SentOnWriteWithin(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		if a := callContextOf(ctx); a != nil {
			if cur, ok := a.Deadline(); !ok || !cur.Before(time.Now().Add(d)) {
				// The bound is the parent of what is derived for the
				// request, with an AfterFunc of its own: the trace's
				// context needs no wrapper to show the call's.
				b := a.send.clock.bound(withSentTrace(ctx, a), a, d)
				return b, b.release
			}
		}
	}
	sent := SentOnWrite(ctx)
	if d <= 0 {
		return context.WithTimeout(sent, d)
	}
	if cur, ok := sent.Deadline(); ok && cur.Before(time.Now().Add(d)) {
		return context.WithCancel(sent) // no bound, but it ends once released
	}
	return context.WithTimeout(sent, d)
}

// callContextOf is the context a stage with TimeoutFromSend gave a call,
// if ctx is that context or adds only values to it (its Done is the
// call's): ctx then ends exactly when the call's context does, with its
// Err (a call's context has no Cause but its Err), and the call's AfterFunc
// serves to learn when. Otherwise nil (a clock that fell back to the
// context package's contexts gives its calls no *attemptCtx).
func callContextOf(ctx context.Context) *attemptCtx {
	a, ok := ctx.Value(sentKey{}).(*attemptCtx)
	if !ok || (context.Context(a) != ctx && ctx.Done() != a.Done()) {
		return nil
	}
	return a
}

// boundCtx is a call's context bounded by SentOnWriteWithin: it behaves as
// the context.WithTimeout of its parent would (Deadline its own, Done,
// Err: the parent's when it ends first, DeadlineExceeded at the bound,
// Canceled once released; Cause = Err, as its parent's), and its end
// releases the contexts derived from it without a goroutine each (its
// AfterFunc).
type boundCtx struct {
	attemptCtx             // parent: the context bounded; deadline: the bound
	call       *attemptCtx // the call's context, which ends it
	callID     uint64      // its registration with call (0: none)
}

// Deadline is the bound's: the parent's was later, or it had none, when
// the bound was set.
func (b *boundCtx) Deadline() (time.Time, bool) { return b.deadline, true }

// Value answers from the parent, Sent's key included (a request sent with
// this context is the call's), except for the context package's own key
// (see attemptCtx.Value).
func (b *boundCtx) Value(key any) any {
	if key == cancelCtxKey {
		return nil
	}
	return b.parent.Value(key)
}

// release ends the context once the call returned.
func (b *boundCtx) release() {
	b.finished.Store(true) // if queued, the next sweep drops it
	b.end(context.Canceled)
	b.unregister()
}

// unregister takes b out of its call's context's list, once b ended.
func (b *boundCtx) unregister() {
	if b.callID != 0 {
		b.call.removeAfter(b.callID)
	}
}

// The bounds of a stage's calls are kept by the stage's attempt clock,
// whose goroutine and timer serve them too: a queue per length of bound
// (a stage's calls use one or two), each in deadline order since its
// bounds all have the same length and their deadlines are read under the
// clock's lock. A bound lives and ends with the stage it is used in.

// boundQueue is the queue of the bounds of one length.
type boundQueue struct {
	d time.Duration
	q fifo[*boundCtx]
}

// bound returns parent bounded to end d from now; a is the call's context,
// timed from its send, that parent ends with.
func (c *attemptClock) bound(parent context.Context, a *attemptCtx, d time.Duration) *boundCtx {
	b := &boundCtx{attemptCtx: attemptCtx{parent: parent, deadline: time.Now().Add(d)}, call: a}
	if b.callID = a.addChild(b); b.callID == 0 {
		return b // ended with the call's context
	}
	c.mu.Lock()
	b.deadline = time.Now().Add(d) // read again under the lock: the queue stays in deadline order
	var bq *boundQueue
	for _, q := range c.bounds {
		if q.d == d {
			bq = q
			break
		}
	}
	if bq == nil {
		bq = &boundQueue{d: d}
		c.bounds = append(c.bounds, bq)
	}
	for bq.q.len() > 0 && bq.q.items[bq.q.head].finished.Load() {
		bq.q.pop() // released: nothing to end
	}
	bq.q.push(b)
	// Every bound queued before b is due no later: only a sweeper that
	// sleeps past b's deadline (or has nothing to wake for) needs a kick.
	kick := c.wake.IsZero() || b.deadline.Before(c.wake)
	if kick {
		c.wake = b.deadline
	}
	c.mu.Unlock()
	if kick {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return b
}

// sweepBounds takes the bounds past their deadline out of their queues,
// drops those released, and returns the next deadline (zero if none).
// A queue left empty goes too: calls bounded by what is left of a budget
// ask for a bound of another length each time, and a queue kept per
// length ever asked for would grow with every call.
// Called with c.mu held.
func (c *attemptClock) sweepBounds(now time.Time, expired []*boundCtx) ([]*boundCtx, time.Time) {
	var next time.Time
	kept := c.bounds[:0]
	for _, bq := range c.bounds {
		for bq.q.len() > 0 {
			b := bq.q.items[bq.q.head]
			if b.finished.Load() {
				bq.q.pop()
				continue
			}
			if b.deadline.After(now) {
				if next.IsZero() || b.deadline.Before(next) {
					next = b.deadline
				}
				break
			}
			expired = append(expired, bq.q.pop())
		}
		if bq.q.len() > 0 {
			kept = append(kept, bq)
		}
	}
	clear(c.bounds[len(kept):])
	c.bounds = kept
	return expired, next
}

// endBounds ends the bounds whose deadline passed.
func endBounds(expired []*boundCtx) {
	for _, b := range expired {
		b.end(context.DeadlineExceeded)
		b.unregister()
	}
}

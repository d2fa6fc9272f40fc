package flow

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attemptClock gives every call of an async stage a context that ends at
// the stage's per-attempt timeout.
//
// context.WithTimeout per call costs a runtime timer, a registration in the
// parent's set of children (one lock and one map shared by every worker of
// the stage) and about 400 bytes of garbage. At the hundreds of thousands
// of calls a second of a busy stage that was the largest allocation of the
// delivery benchmark and 14% of its CPU. All calls of a stage share one
// timeout, so their deadlines come in the order the calls start: one FIFO
// queue, swept by one goroutine on one timer, does the timers' work, and a
// call's context is one small object (and its done channel, if somebody
// asks for it) that nothing else refers to. With adaptive timeouts
// (RetryPolicy.TimeoutFactor) calls' timeouts differ, and the queue is a
// heap by deadline instead.
//
// The context behaves as WithTimeout's does: Deadline, Done, Err
// (DeadlineExceeded on timeout, the parent's error when the stage stops,
// Canceled once the call returned), Cause (= Err), Value from the parent,
// AfterFunc, and contexts derived from it end with it without a goroutine
// each.
//
// With TimeoutFromSend (fromSend) a call's clock starts when it says it was
// sent (attempt_sent.go): until then it waits in the unsent list, with no
// deadline, and joins the queue when it sends. Every call still has the
// same timeout, so joining the queue when the clock starts keeps the
// deadlines in queue order.
type attemptClock struct {
	parent   context.Context
	timeout  time.Duration // 0: none (fromSend only: the clock then only records when calls were sent)
	adaptive *adaptiveTimeout
	fromSend bool
	std      bool // the context package's cancel key was not learned: use its contexts (see cancelCtxKey)

	mu      sync.Mutex
	queue   fifo[*attemptCtx]
	byDue   byDeadline    // with adaptive timeouts, the queue: a heap by deadline
	unsent  *attemptCtx   // fromSend: calls with no deadline, linked through send.prev and send.next
	bounds  []*boundQueue // fromSend: the calls' bounds (SentOnWriteWithin), by length
	wake    time.Time     // the next deadline the sweeper wakes for (zero: none)
	stopped bool
	kick    chan struct{} // a deadline came that the sweeper may sleep past (a queue was empty)
	quit    chan struct{}
	done    chan struct{}
}

// attemptCtx is one call's context. The clock ends it at the deadline or
// when the parent ends, and the call's end ends it (as WithTimeout's cancel
// would) to release what was derived from it. Contexts derived from it
// register through AfterFunc, so they need no goroutine either.
type attemptCtx struct {
	parent   context.Context
	deadline time.Time     // fixed at start, or (send set, or most set) set under mu; zero: none yet
	timeout  time.Duration // the attempt's timeout, set with deadline
	limit    time.Duration // the most the attempt may last (adaptive timeouts; 0: no limit)
	most     time.Duration // adaptive timeouts: the longest timeout extend may give it (what Deadline reports); 0: the deadline never moves
	finished atomic.Bool

	mu     sync.Mutex
	done   chan struct{} // made by the first Done
	err    error
	afters afterList

	send *sendState // under TimeoutFromSend; nil otherwise
}

// closedDone is the Done channel of a context that ended before anybody
// asked for one.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (a *attemptCtx) end(err error) {
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		return
	}
	a.err = err
	if a.done == nil {
		a.done = closedDone
	} else {
		close(a.done)
	}
	fs := a.afters.take()
	a.mu.Unlock()
	for _, e := range fs {
		if e.child != nil {
			e.child.end(err)
			continue
		}
		go e.f()
	}
}

// cancelCtxKey is the key under which the context package looks for the
// cancelable context behind a Context (for Cause, and to derive contexts
// without a goroutine). A call's context must not pass that question on to
// its parent, whose cancelable context is not the call's. The key is
// unexported; it is learned once by watching which key context.Cause asks
// for. If that ever fails, the stage falls back to context.WithTimeout.
var cancelCtxKey = func() any {
	s := &keySpy{Context: context.Background()}
	_ = context.Cause(s)
	return s.key
}()

type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Err() error { return context.Canceled } // Cause asks only a context that ended

func (s *keySpy) Value(key any) any {
	s.key = key
	return nil
}

// newAttemptClock starts the clock of a stage; stop it when no call runs.
// fromSend starts each call's timeout when it says it was sent rather than
// at its start (TimeoutFromSend). adaptive, if not nil, gives each call
// its timeout (then at least timeout) in place of timeout.
func newAttemptClock(parent context.Context, timeout time.Duration, fromSend bool, adaptive *adaptiveTimeout) *attemptClock {
	c := &attemptClock{parent: parent, timeout: timeout, adaptive: adaptive, fromSend: fromSend, std: cancelCtxKey == nil,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// timeoutFor is the timeout of a call that may last at most limit (0: no
// limit): the stage's, or with adaptive timeouts the one the service's
// latency calls for now.
func (c *attemptClock) timeoutFor(limit time.Duration) time.Duration {
	if c.adaptive != nil {
		return c.adaptive.timeout(limit)
	}
	return c.timeout
}

// timeoutOf is the timeout a call's context had (for its error).
func (c *attemptClock) timeoutOf(ctx context.Context) time.Duration {
	switch a := ctx.(type) {
	case *attemptCtx:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.timeout
	case *stdSent:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.timeout
	}
	if v, ok := ctx.Value(stdTimeoutKey{}).(time.Duration); ok {
		return v
	}
	return c.timeout
}

// start returns the context of a call starting now that may last at most
// limit (0: no limit beyond its timeout; see adaptiveTimeout.timeout),
// and the function that ends it, which returns when the call said it was
// sent (zero if it did not, or the clock is not fromSend).
func (c *attemptClock) start(now time.Time, limit time.Duration) (context.Context, func() time.Time) {
	if c.fromSend {
		return c.startUnsent(limit)
	}
	timeout := c.timeoutFor(limit)
	if c.std {
		ctx, cancel := context.WithDeadline(context.WithValue(c.parent, stdTimeoutKey{}, timeout), now.Add(timeout))
		return ctx, func() time.Time { cancel(); return time.Time{} }
	}
	a := &attemptCtx{parent: c.parent, deadline: now.Add(timeout), timeout: timeout, limit: limit}
	if c.adaptive != nil {
		a.most = c.adaptive.most(limit) // at least the floor, which is positive
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		a.end(c.parent.Err())
		return a, a.finish
	}
	c.pushUnlock(a)
	return a, a.finish
}

// stdTimeoutKey holds, in the fallback contexts of calls timed from their
// start, the call's timeout (for its error).
type stdTimeoutKey struct{}

// pushUnlock queues a call's deadline, releases c.mu (held by the caller)
// and wakes the sweeper if the queue was empty or the call is now due
// first.
func (c *attemptClock) pushUnlock(a *attemptCtx) {
	first := c.qpush(a)
	c.mu.Unlock()
	if first {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// finish ends the call's context once the call returned, and returns when
// the call said it was sent (see start).
func (a *attemptCtx) finish() time.Time {
	if a.send != nil {
		return a.finishSent()
	}
	a.finished.Store(true)
	a.end(context.Canceled)
	return time.Time{}
}

// Deadline is the earlier of the parent's and the call's. A call timed
// from its send has none of its own until then. With adaptive timeouts,
// the call's is the latest the clock may move its deadline to (see
// extend), fixed once set: the call may be cut earlier, but a Deadline
// that moved later would break what the context package and
// SentOnWriteWithin rely on - a context derived with an earlier deadline
// of its own gets no timer when its parent's Deadline is earlier still,
// and would then outlive its own deadline once the call is extended.
func (a *attemptCtx) Deadline() (time.Time, bool) {
	d := a.ownDeadline()
	pd, ok := a.parent.Deadline()
	if d.IsZero() {
		return pd, ok
	}
	if ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

func (a *attemptCtx) ownDeadline() time.Time {
	if a.send == nil && a.most == 0 {
		return a.deadline // fixed at start
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.most > 0 && !a.deadline.IsZero() {
		// deadline - timeout, the call's start (or send), stays put as
		// extend moves both.
		return a.deadline.Add(a.most - a.timeout)
	}
	return a.deadline
}

func (a *attemptCtx) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = make(chan struct{})
	}
	return a.done
}

func (a *attemptCtx) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Value answers from the parent, except for the context package's own
// key: the parent's cancelable context is not this one's, and Cause must
// fall back to Err; and for Sent's key, which finds this call (if it is
// timed from its send) and never an enclosing one.
func (a *attemptCtx) Value(key any) any {
	switch key {
	case cancelCtxKey:
		return nil
	case sentKey{}:
		if a.send == nil {
			return nil
		}
		return a
	}
	return a.parent.Value(key)
}

// AfterFunc is what context.AfterFunc and contexts derived from this one
// use to learn of its end without a goroutine of their own.
func (a *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	id := a.afters.add(afterEntry{f: f})
	a.mu.Unlock()
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.afters.remove(id)
	}
}

// addChild registers b to end when a does, with a's error, or at once if
// a ended; it returns the id for removeAfter, 0 if a had ended.
func (a *attemptCtx) addChild(b *boundCtx) uint64 {
	a.mu.Lock()
	if err := a.err; err != nil {
		a.mu.Unlock()
		b.end(err)
		return 0
	}
	id := a.afters.add(afterEntry{child: b})
	a.mu.Unlock()
	return id
}

// removeAfter takes what was registered as id out, if a has not ended.
func (a *attemptCtx) removeAfter(id uint64) {
	a.mu.Lock()
	a.afters.remove(id)
	a.mu.Unlock()
}

// run cancels the calls whose deadline passed, sleeping until the oldest
// running call's deadline (no sooner than a millisecond after the last
// sweep, so that a busy stage wakes it at most a thousand times a second),
// and cancels every running call when the parent ends, those not yet sent
// included.
func (c *attemptClock) run() {
	defer close(c.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		next, ok := c.sweep(time.Now())
		var wake <-chan time.Time
		if ok {
			t.Reset(max(time.Until(next), time.Millisecond))
			wake = t.C
		}
		select {
		case <-wake:
		case <-c.kick:
			t.Stop()
		case <-c.parent.Done():
			c.mu.Lock()
			c.stopped = true
			var queued []*attemptCtx
			for c.qlen() > 0 {
				queued = append(queued, c.qpop())
			}
			unsent := c.takeUnsent()
			c.mu.Unlock()
			err := c.parent.Err()
			for _, a := range queued {
				a.end(err)
			}
			for _, a := range unsent {
				a.end(err)
			}
			<-c.quit
			return
		case <-c.quit:
			return
		}
	}
}

// sweep drops the calls that returned and times out those past their
// deadline, from the oldest on, and likewise the calls' bounds
// (SentOnWriteWithin); it returns the next deadline to wake for.
func (c *attemptClock) sweep(now time.Time) (time.Time, bool) {
	var expired []*attemptCtx
	var next time.Time
	c.mu.Lock()
	for c.qlen() > 0 {
		a := c.qhead()
		if a.finished.Load() {
			c.qpop()
			continue
		}
		if a.deadline.After(now) {
			next = a.deadline
			break
		}
		if c.extend(a) {
			heap.Fix(&c.byDue, 0)
			continue
		}
		expired = append(expired, c.qpop())
		if c.adaptive != nil {
			// The service did not answer within a.timeout: the next
			// attempts' timeout is raised at once (as the stage's
			// observe would a moment later), and the calls due in this
			// sweep too are given it rather than all cut together.
			c.adaptive.raise(a.timeout)
		}
	}
	var bounds []*boundCtx
	if len(c.bounds) > 0 {
		var bnext time.Time
		bounds, bnext = c.sweepBounds(now, nil)
		if !bnext.IsZero() && (next.IsZero() || bnext.Before(next)) {
			next = bnext
		}
	}
	c.wake = next
	c.mu.Unlock()
	c.timeOut(expired)
	endBounds(bounds)
	return next, !next.IsZero()
}

// extend moves a's deadline, which has passed, later if the stage's
// adaptive timeout has grown past a's since a started (another call timed
// out, or the service's p99 rose): a's timeout is then the one a call
// starting now would get, from a's own start (or send), within a's limit.
// A call is cut only once it has had the longest timeout the stage gave
// while it ran: when a service turns slow, the first call to time out
// raises the timeout and those in flight with it are waited for, instead
// of every call in flight being cut at the timeout that was too short.
// Called with c.mu held, for the head of the queue.
func (c *attemptClock) extend(a *attemptCtx) bool {
	if c.adaptive == nil {
		return false
	}
	t := c.adaptive.timeout(a.limit)
	if t <= a.timeout {
		return false
	}
	a.mu.Lock()
	a.deadline, a.timeout = a.deadline.Add(t-a.timeout), t
	a.mu.Unlock()
	return true
}

func (c *attemptClock) timeOut(expired []*attemptCtx) {
	for _, a := range expired {
		a.end(context.DeadlineExceeded)
	}
}

// stop ends the clock's goroutine.
func (c *attemptClock) stop() {
	close(c.quit)
	<-c.done
}

// The queue of deadlines. While every call has the same timeout, calls
// join it in deadline order and a FIFO is all it takes; with adaptive
// timeouts a call's timeout depends on when it starts and on what is left
// of its budget, and the queue is a heap by deadline. Called with c.mu
// held.

// qpush queues a and reports whether it is now the first due.
func (c *attemptClock) qpush(a *attemptCtx) bool {
	if c.adaptive == nil {
		c.queue.push(a)
		return c.queue.len() == 1
	}
	heap.Push(&c.byDue, a)
	return c.byDue[0] == a
}

func (c *attemptClock) qlen() int {
	if c.adaptive == nil {
		return c.queue.len()
	}
	return len(c.byDue)
}

// qhead is the call due first; the queue must not be empty.
func (c *attemptClock) qhead() *attemptCtx {
	if c.adaptive == nil {
		return c.queue.items[c.queue.head]
	}
	return c.byDue[0]
}

// qpop takes the call due first out; the queue must not be empty.
func (c *attemptClock) qpop() *attemptCtx {
	if c.adaptive == nil {
		return c.queue.pop()
	}
	return heap.Pop(&c.byDue).(*attemptCtx)
}

// byDeadline is a min-heap of calls by deadline (container/heap).
type byDeadline []*attemptCtx

func (h byDeadline) Len() int           { return len(h) }
func (h byDeadline) Less(i, k int) bool { return h[i].deadline.Before(h[k].deadline) }
func (h byDeadline) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *byDeadline) Push(x any)        { *h = append(*h, x.(*attemptCtx)) }
func (h *byDeadline) Pop() any {
	old := *h
	n := len(old) - 1
	a := old[n]
	old[n] = nil
	*h = old[:n]
	return a
}

package flow

import (
	"context"
	"sync"
	"time"
)

// The attempt clock's side of TimeoutFromSend. A call starts unsent: its
// context has no deadline of its own and sits in the clock's unsent list,
// so that it still ends when the stage stops. Sent takes it out of the list
// and, if the stage has an attempt timeout, gives it its deadline and puts
// it in the queue, under the clock's lock with the time read there: queue
// order is send order, and with a fixed timeout every call has the same,
// so the queue stays in deadline order (adaptive timeouts order it by
// deadline: see qpush).

// sentKey is the context key under which a call's context answers with
// what Sent marks.
type sentKey struct{}

// sender is a call's context timed from its send.
type sender interface {
	markSent()
	markAnswered()
	clearAnswered()        // an answer marked was an interim one (1xx)
	answeredAt() time.Time // the last Answered; zero if none
}

// sendState is what a call timed from its send adds to its attemptCtx (a
// separate struct, so that the calls of other stages do not carry it). All
// but clock is guarded by clock.mu.
type sendState struct {
	clock      *attemptClock
	sentAt     time.Time // when the call said it was sent; zero until then
	answered   time.Time // when it last said it had its answer (under the attemptCtx's mu)
	over       bool      // the call returned: a later Sent changes nothing
	listed     bool      // in clock.unsent
	prev, next *attemptCtx
}

// unsentAttempt allocates a call's context and its send state at once.
type unsentAttempt struct {
	attemptCtx
	sendState
}

// startUnsent returns the context of a call timed from its send, and the
// function that ends it and returns when it was sent.
func (c *attemptClock) startUnsent(limit time.Duration) (context.Context, func() time.Time) {
	if c.std {
		return c.startStdUnsent(limit)
	}
	u := &unsentAttempt{attemptCtx: attemptCtx{parent: c.parent, limit: limit}, sendState: sendState{clock: c}}
	if c.adaptive != nil {
		u.most = c.adaptive.most(limit)
	}
	a := &u.attemptCtx
	a.send = &u.sendState
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		a.end(c.parent.Err())
		return a, a.finish
	}
	c.link(a)
	c.mu.Unlock()
	return a, a.finish
}

// markSent starts the call's clock, the first time only, and not once the
// call returned or the stage stopped (its context ended then).
func (a *attemptCtx) markSent() {
	s, c := a.send, a.send.clock
	c.mu.Lock()
	if s.over || !s.sentAt.IsZero() || c.stopped {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	s.sentAt = now
	timeout := c.timeoutFor(a.limit)
	if timeout <= 0 {
		// No timeout: the call only needed its send time. It stays in the
		// unsent list, which is how it ends when the stage stops.
		c.mu.Unlock()
		return
	}
	c.unlink(a)
	a.mu.Lock()
	a.deadline, a.timeout = now.Add(timeout), timeout
	a.mu.Unlock()
	c.pushUnlock(a)
}

// markAnswered notes when the call last said it had its answer. It takes
// the call's own lock, not the clock's that all the stage's calls share.
func (a *attemptCtx) markAnswered() {
	now := time.Now()
	a.mu.Lock()
	a.send.answered = now
	a.mu.Unlock()
}

func (a *attemptCtx) clearAnswered() {
	a.mu.Lock()
	a.send.answered = time.Time{}
	a.mu.Unlock()
}

func (a *attemptCtx) answeredAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.send.answered
}

// finishSent is finish for a call timed from its send.
func (a *attemptCtx) finishSent() time.Time {
	s, c := a.send, a.send.clock
	c.mu.Lock()
	sent := s.sentAt
	s.over = true
	if s.listed {
		c.unlink(a)
	}
	c.mu.Unlock()
	a.finished.Store(true) // if queued, the sweep drops it
	a.end(context.Canceled)
	return sent
}

// link adds a to the unsent list. Called with c.mu held.
func (c *attemptClock) link(a *attemptCtx) {
	s := a.send
	s.next = c.unsent
	if c.unsent != nil {
		c.unsent.send.prev = a
	}
	c.unsent = a
	s.listed = true
}

// unlink takes a out of the unsent list. Called with c.mu held.
func (c *attemptClock) unlink(a *attemptCtx) {
	s := a.send
	if s.prev != nil {
		s.prev.send.next = s.next
	} else {
		c.unsent = s.next
	}
	if s.next != nil {
		s.next.send.prev = s.prev
	}
	s.prev, s.next, s.listed = nil, nil, false
}

// takeUnsent empties the unsent list and returns what it held, for the
// stage's end to end them. Called with c.mu held.
func (c *attemptClock) takeUnsent() []*attemptCtx {
	var all []*attemptCtx
	for c.unsent != nil {
		a := c.unsent
		c.unlink(a)
		all = append(all, a)
	}
	return all
}

// stdSent is a call's context timed from its send when the attempt clock
// falls back to the context package's contexts (see cancelCtxKey): a
// cancelable context, and a timer started by Sent that cancels it with the
// cause DeadlineExceeded (its Err is then Canceled; the stage reads the
// cause).
type stdSent struct {
	context.Context
	cancel context.CancelCauseFunc
	clock  *attemptClock
	limit  time.Duration

	mu       sync.Mutex
	timeout  time.Duration // set when sent
	sentAt   time.Time
	answered time.Time
	over     bool
	timer    *time.Timer
}

func (c *attemptClock) startStdUnsent(limit time.Duration) (context.Context, func() time.Time) {
	ctx, cancel := context.WithCancelCause(c.parent)
	s := &stdSent{Context: ctx, cancel: cancel, clock: c, limit: limit}
	return s, s.finish
}

func (s *stdSent) Value(key any) any {
	if key == (sentKey{}) {
		return s
	}
	return s.Context.Value(key)
}

func (s *stdSent) Deadline() (time.Time, bool) {
	s.mu.Lock()
	sent, timeout := s.sentAt, s.timeout
	s.mu.Unlock()
	pd, ok := s.Context.Deadline()
	if sent.IsZero() || timeout <= 0 {
		return pd, ok
	}
	if d := sent.Add(timeout); !ok || d.Before(pd) {
		return d, true
	}
	return pd, true
}

func (s *stdSent) markSent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over || !s.sentAt.IsZero() {
		return
	}
	s.sentAt = time.Now()
	s.timeout = s.clock.timeoutFor(s.limit)
	if s.timeout > 0 {
		s.timer = time.AfterFunc(s.timeout, func() { s.cancel(context.DeadlineExceeded) })
	}
}

func (s *stdSent) markAnswered() {
	now := time.Now()
	s.mu.Lock()
	s.answered = now
	s.mu.Unlock()
}

func (s *stdSent) clearAnswered() {
	s.mu.Lock()
	s.answered = time.Time{}
	s.mu.Unlock()
}

func (s *stdSent) answeredAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

func (s *stdSent) finish() time.Time {
	s.mu.Lock()
	s.over = true
	if s.timer != nil {
		s.timer.Stop()
	}
	sent := s.sentAt
	s.mu.Unlock()
	s.cancel(context.Canceled)
	return sent
}

// Package ownsim runs groups of ownership.Balancers — the library's own
// code — over an in-memory store in simulated time, or over any store in
// real time, through scenarios of the kind a group of hundreds of
// instances lives through (all starting at once, instances joining,
// leaving, crashing, restarting one by one, the store unreachable, a few
// instances on a slow link), and measures what users ask of it: whether
// two instances ever process one partition at once, how long the group
// takes to share the partitions fairly, how many partitions move, and how
// much work the store does.
package ownsim

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// Sim is a simulated clock that is also a cooperative scheduler: the
// goroutines started through Go (actors) run one at a time, each until it
// waits on the clock (Wait) or ends; time jumps to the next timer only
// when every actor waits. A run is deterministic: the same actors doing
// the same things see the same times in the same order. AfterFunc
// callbacks run as new actors. A value sent on (or a close of) the wake
// channel of a Wait, or the end of its context, wakes the waiter at the
// current time.
//
// An actor must not block on anything but the clock for long (a mutex
// held by another actor that waits on the clock deadlocks the run).
type Sim struct {
	mu      sync.Mutex
	now     time.Time
	nowNs   atomic.Int64 // now, for Now without the lock
	seq     uint64
	events  eventHeap
	waiters []*waiter // waiting on a channel or context: polled
	ready   []*waiter // to resume at the current time, in order
	live    int       // actors not ended
	yield   chan struct{}
	steps   int64
}

// NewSim returns a simulated clock at start.
func NewSim(start time.Time) *Sim {
	s := &Sim{now: start, yield: make(chan struct{})}
	s.nowNs.Store(start.UnixNano())
	return s
}

type waiter struct {
	wake    chan bool       // the actor's: true if its time passed
	ctxDone <-chan struct{} // the context's
	ch      <-chan struct{}
	timed   *event
	done    bool
	timeout bool
}

type event struct {
	at    time.Time
	seq   uint64
	dead  bool
	w     *waiter // a Wait's end
	fn    func()  // an AfterFunc: run as an actor
	inner func()  // a context's deadline: run by the scheduler
	index int
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *eventHeap) Push(x any)   { e := x.(*event); e.index = len(*h); *h = append(*h, e) }
func (h *eventHeap) Pop() any     { old := *h; e := old[len(old)-1]; *h = old[:len(old)-1]; return e }
func (s *Sim) push(e *event)      { s.seq++; e.seq = s.seq; heap.Push(&s.events, e) }
func (s *Sim) after(d time.Duration) time.Time {
	if d < 0 {
		d = 0
	}
	return s.now.Add(d)
}

// Now returns the simulated time.
func (s *Sim) Now() time.Time { return time.Unix(0, s.nowNs.Load()).UTC() }

// Steps returns how many times an actor was resumed (a measure of the
// simulation's work).
func (s *Sim) Steps() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps
}

// Go starts f as an actor; it runs once the actors before it have
// waited.
func (s *Sim) Go(f func()) {
	w := &waiter{wake: make(chan bool, 1)}
	s.mu.Lock()
	s.live++
	s.ready = append(s.ready, w)
	s.mu.Unlock()
	go func() {
		<-w.wake
		defer s.exit()
		f()
	}()
}

func (s *Sim) exit() {
	s.mu.Lock()
	s.live--
	s.mu.Unlock()
	s.yield <- struct{}{}
}

// Wait waits, as ownership.Clock's Wait, yielding to the other actors.
// It must be called from an actor.
func (s *Sim) Wait(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	if ctx == nil {
		ctx = context.Background()
	}
	w := &waiter{wake: make(chan bool, 1), ctxDone: ctx.Done(), ch: wake}
	s.mu.Lock()
	if d >= 0 {
		w.timed = &event{at: s.after(d), w: w}
		s.push(w.timed)
	}
	if w.ctxDone != nil || wake != nil {
		s.waiters = append(s.waiters, w)
	}
	s.mu.Unlock()
	s.yield <- struct{}{}
	return <-w.wake
}

// Sleep waits d (from an actor).
func (s *Sim) Sleep(d time.Duration) { s.Wait(context.Background(), d, nil) }

type simTimer struct {
	s  *Sim
	f  func()
	ev *event
}

// AfterFunc runs f as a new actor once d has passed.
func (s *Sim) AfterFunc(d time.Duration, f func()) ownership.Timer {
	t := &simTimer{s: s, f: f}
	t.Reset(d)
	return t
}

func (t *simTimer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.stop()
}

func (t *simTimer) stop() bool {
	if t.ev == nil || t.ev.dead || t.ev.index < 0 {
		return false
	}
	t.ev.dead = true
	return true
}

func (t *simTimer) Reset(d time.Duration) bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	was := t.stop()
	t.ev = &event{at: t.s.after(d), fn: t.f}
	t.s.push(t.ev)
	return was
}

// simCtx is a context that ends at a simulated time.
type simCtx struct {
	context.Context
	deadline time.Time
	timedOut atomic.Bool
}

func (c *simCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *simCtx) Err() error {
	if err := c.Context.Err(); err != nil && c.timedOut.Load() && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// WithTimeout returns a context that ends once d has passed in simulated
// time.
func (s *Sim) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	c := &simCtx{Context: inner, deadline: s.after(d)}
	ev := &event{at: c.deadline, inner: func() { c.timedOut.Store(true); cancel(context.DeadlineExceeded) }}
	s.push(ev)
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		ev.dead = true
		s.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Run starts main as an actor and runs the actors until every one has
// ended. It panics if actors remain that nothing can wake.
func (s *Sim) Run(main func()) {
	s.Go(main)
	for {
		s.mu.Lock()
		w := s.next()
		if w == nil {
			live := s.live
			s.mu.Unlock()
			if live == 0 {
				return
			}
			panic(fmt.Sprintf("ownsim: %d actors wait and nothing can wake them", live))
		}
		s.steps++
		s.mu.Unlock()
		w.wake <- w.timeout
		<-s.yield
	}
}

// next returns the next actor to resume, advancing time when none is
// ready. Called with mu held.
func (s *Sim) next() *waiter {
	for {
		if len(s.ready) > 0 {
			w := s.ready[0]
			s.ready[0] = nil
			s.ready = s.ready[1:]
			return w
		}
		s.poll()
		if len(s.ready) > 0 {
			continue
		}
		if len(s.events) == 0 {
			return nil
		}
		e := heap.Pop(&s.events).(*event)
		e.index = -1
		if e.dead {
			continue
		}
		if e.at.After(s.now) {
			s.now = e.at
			s.nowNs.Store(e.at.UnixNano())
		}
		switch {
		case e.w != nil:
			if !e.w.done {
				e.w.done, e.w.timeout = true, true
				s.ready = append(s.ready, e.w)
			}
		case e.fn != nil:
			w := &waiter{wake: make(chan bool, 1)}
			s.live++
			s.ready = append(s.ready, w)
			f := e.fn
			go func() {
				<-w.wake
				defer s.exit()
				f()
			}()
		case e.inner != nil:
			e.inner()
		}
	}
}

// poll wakes the waiters whose channel received or whose context ended,
// in the order they began to wait. Called with mu held.
func (s *Sim) poll() {
	keep := s.waiters[:0]
	for _, w := range s.waiters {
		if w.done {
			continue
		}
		// Two non-blocking receives: each is lock-free while its
		// channel is empty and open (most waiters, most of the time).
		fired := false
		select {
		case <-w.ch:
			fired = true
		default:
		}
		if !fired {
			select {
			case <-w.ctxDone:
				fired = true
			default:
			}
		}
		if !fired {
			keep = append(keep, w)
			continue
		}
		w.done = true
		if w.timed != nil {
			w.timed.dead = true
		}
		s.ready = append(s.ready, w)
	}
	clear(s.waiters[len(keep):])
	s.waiters = keep
}

var _ ownership.Clock = (*Sim)(nil)

// Signal is a one-time wake-up of the actors waiting on it: cheaper for
// the scheduler than a channel, which it must poll.
type Signal interface {
	// Wait returns true once d has passed (d < 0: never), false once the
	// signal fired (at once if it had).
	Wait(d time.Duration) bool
	// Fire wakes every waiter, now and later.
	Fire()
}

type simSignal struct {
	s       *Sim
	fired   bool
	waiters []*waiter
}

// NewSignal returns a signal on the simulated clock.
func (s *Sim) NewSignal() Signal { return &simSignal{s: s} }

func (g *simSignal) Wait(d time.Duration) bool {
	s := g.s
	s.mu.Lock()
	if g.fired {
		s.mu.Unlock()
		return false
	}
	w := &waiter{wake: make(chan bool, 1)}
	if d >= 0 {
		w.timed = &event{at: s.after(d), w: w}
		s.push(w.timed)
	}
	g.waiters = append(g.waiters, w)
	s.mu.Unlock()
	s.yield <- struct{}{}
	return <-w.wake
}

func (g *simSignal) Fire() {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g.fired = true
	for _, w := range g.waiters {
		if w.done {
			continue
		}
		w.done = true
		if w.timed != nil {
			w.timed.dead = true
		}
		s.ready = append(s.ready, w)
	}
	g.waiters = nil
}

// Real is the system clock, with Sleep, for runs against a real store.
type Real struct{ ownership.SystemClock }

// Sleep waits d.
func (Real) Sleep(d time.Duration) { time.Sleep(d) }

type realSignal struct {
	once sync.Once
	c    chan struct{}
}

// NewSignal returns a signal on the system clock.
func (Real) NewSignal() Signal { return &realSignal{c: make(chan struct{})} }

func (g *realSignal) Wait(d time.Duration) bool {
	return ownership.SystemClock{}.Wait(context.Background(), d, g.c)
}

func (g *realSignal) Fire() { g.once.Do(func() { close(g.c) }) }

// Clock is what a run needs of its clock: the balancer's, and a sleep for
// the scenario.
type Clock interface {
	ownership.Clock
	Sleep(d time.Duration)
	NewSignal() Signal
}

var (
	_ Clock = (*Sim)(nil)
	_ Clock = Real{}
)

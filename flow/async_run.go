package flow

import (
	"context"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

type asyncJob[In, Out any] struct {
	seq      int64
	msg      stream.Message[In]
	key      string
	out      Out
	err      error
	done     bool
	skipped  bool // SkipCall answered it: it makes no call
	ahead    bool // ServeFirst picked it: it waits for a slot ahead of the others
	inFlight int  // calls in flight when its call started

	attempts  int           // calls made
	first     time.Time     // when the first call started
	lastDelay time.Duration // the previous retry wait (decorrelated jitter)
	notBefore time.Time     // the latest end of a Retry-After a throttling answer gave
	due       time.Time     // when a delayed job may run again
	class     stream.Classification

	breakerDone func(backpressure.Outcome) // the breaker's, while a call's outcome is being reported
	span        trace.Span                 // the message's span in this stage, with tracing on

	since, callStart time.Time // with Lanes: when its wait began (lanes.arrived), when its call started
}

// goesAhead reports whether j waits for a slot before the messages that
// have not started: ServeFirst picked it, or it is a retry, which waited
// its turn once already.
func (j *asyncJob[In, Out]) goesAhead() bool { return j.ahead || j.attempts > 0 }

type keyGroup[In, Out any] struct {
	running int
	waiting fifo[*asyncJob[In, Out]]
}

// asyncRun is the state of one Run: only the stage goroutine touches it,
// except completions, which call goroutines append to under mu.
type asyncRun[In, Out any] struct {
	a             *Async[In, Out]
	in            *stream.Inlet[In]
	out           *stream.Outlet[Out]
	ctx, callsCtx context.Context
	pool          *workers[In, Out]

	held       int // jobs accepted and not yet emitted
	inFlight   int // jobs handed to the workers (queued or called) or run inline, not yet complete
	nextSeq    int64
	ready      fifo[*asyncJob[In, Out]]
	readyAhead fifo[*asyncJob[In, Out]] // ServeFirst's and retries, called before ready's
	lanes      *lanes[In, Out]          // the ready queue instead of ready, with Lanes
	// skipping are the jobs SkipCall answered whose key let them go: they
	// need no slot, and complete in the stage's round that took them.
	skipping []*asyncJob[In, Out]
	groups   map[string]*keyGroup[In, Out]
	groupCap int
	// freeGroups are key groups whose key has nothing in the stage, kept
	// for the next new key: with many keys nearly every message starts one.
	freeGroups []*keyGroup[In, Out]
	ring       []*asyncJob[In, Out] // InOrder reorder buffer, by seq % window
	head       int64                // InOrder: next seq to emit

	mu     sync.Mutex
	doneQ  []*asyncJob[In, Out]
	spare  []*asyncJob[In, Out]
	notify chan struct{}
	free   []*asyncJob[In, Out]  // recycled jobs (stage goroutine only)
	slots  []stream.Message[Out] // free output slots being filled by emit
	filled int                   // how many of them are filled

	inline       []*asyncJob[In, Out] // scratch of runInline
	starting     []*asyncJob[In, Out] // scratch of start
	inlineCounts callCounts
	delayed      delayQueue[In, Out] // jobs waiting for their next attempt
	log          *logx.Limited
	clock        *attemptClock      // per-attempt timeouts, and send times (TimeoutFromSend), if any
	emitting     *asyncJob[In, Out] // the job whose OnDone runs
	// onCall and onDone are the OnCall and OnDone options with the
	// metrics' histograms, fixed when the run starts.
	onCall  func(CallInfo)
	onDone  func(DoneInfo)
	timer   *time.Timer
	timerAt time.Time
	// clocked: every call's start and end are needed (limiter, hooks,
	// retries, timeouts, lanes). Otherwise workers read the clock only for
	// the chunks that keep the average call duration current (see work).
	clocked bool
	tracer  *asyncTracer // nil: tracing off
}

// yieldAbove is the calls in flight from which the stage yields once
// before it parks (see loop).
const yieldAbove = 16

func (r *asyncRun[In, Out]) loop() error {
	var (
		cur       *stream.Batch[In]
		idx       int
		inputDone bool
	)
	defer func() {
		if cur != nil {
			cur.Release()
		}
	}()
	yielded := false
	for {
		if err := r.acceptFrom(&cur, &idx); err != nil {
			return err
		}
		r.wakeDue()
		r.start()
		if n, err := r.complete(); err != nil {
			return err
		} else if n > 0 {
			continue
		}
		// A worker counts its call out after handing it back, so the
		// stage may have emitted it already: held bounds the calls running.
		running := min(r.pool.activeN.Load(), int64(r.held))
		r.a.inFlight.Store(running)
		r.a.waiting.Store(int64(r.held) - running)
		if inputDone && r.held == 0 {
			return nil
		}
		// With many calls in flight a completion comes every few
		// microseconds: before parking, let the workers whose calls just
		// returned run once, and take their completions in this round.
		// Parking at once cost a wake-up of the stage, and a flush and
		// wake-up of the next stage, for nearly every completion.
		if !yielded && running >= yieldAbove {
			yielded = true
			runtime.Gosched()
			continue
		}
		yielded = false
		if err := r.in.FlushOutputs(r.ctx); err != nil {
			return err
		}
		var inC <-chan *stream.Batch[In]
		if cur == nil && !inputDone && r.held < r.a.o.window {
			inC = r.in.C()
		}
		select {
		case b, ok := <-inC:
			if !ok {
				inputDone = true
				continue
			}
			r.in.Received(b)
			cur, idx = b, 0
		case <-r.notify:
		case <-r.timerC():
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// accept takes a message into the stage: ready to call, or waiting for its
// key. The key is computed first, so that a panic in the key function
// leaves the stage as it was.
func (r *asyncRun[In, Out]) accept(m *stream.Message[In]) {
	var key string
	if r.groups != nil {
		key = r.a.key(m)
	}
	// Whether it needs a call is known now too, before the stage changes
	// (a panic in SkipCall's function fails it as one in the key does).
	// It needs no call slot, so it waits for none (see letGo), but it
	// takes its key's turn and its window place like any message, so that
	// no key's order, nor the input order InOrder, changes.
	var skipOut Out
	skip := false
	if r.a.skip != nil {
		skipOut, skip = r.a.skip(m.Value)
	}
	ahead := r.a.first != nil && !skip && r.a.first(m.Value)
	var j *asyncJob[In, Out]
	if n := len(r.free); n > 0 {
		// A recycled job: set each field rather than zero the whole struct
		// and copy the message twice.
		j, r.free = r.free[n-1], r.free[:n-1]
		var zero Out
		j.out, j.err, j.done, j.key = zero, nil, false, ""
		j.attempts, j.first, j.lastDelay, j.notBefore = 0, time.Time{}, 0, time.Time{}
		j.span = nil
	} else {
		j = new(asyncJob[In, Out])
	}
	j.seq, j.msg = r.nextSeq, *m
	j.skipped, j.ahead = skip, ahead
	if skip {
		j.out = skipOut
	}
	if r.tracer != nil && !tracing.NotSampled(&j.msg.Envelope) {
		j.span = r.tracer.start(j, &j.msg.Envelope)
	}
	r.nextSeq++
	r.held++
	if r.ring != nil {
		r.ring[j.seq%int64(len(r.ring))] = j
	}
	if r.lanes != nil {
		r.lanes.arrived(j)
	}
	if r.groups == nil {
		r.letGo(j)
		return
	}
	j.key = key
	g := r.groups[key]
	if g == nil {
		if n := len(r.freeGroups); n > 0 {
			g, r.freeGroups = r.freeGroups[n-1], r.freeGroups[:n-1]
		} else {
			g = &keyGroup[In, Out]{}
		}
		r.groups[j.key] = g
	}
	if g.running < r.groupCap {
		g.running++
		r.letGo(j)
	} else {
		g.waiting.push(j)
	}
}

// start hands the ready jobs to the workers, which run them within the
// limit (see workers). With Lanes, ServeFirst or Retry it hands no more
// than may run now: the lanes choose which level goes next when a slot
// is free, and a message ServeFirst picks, or a retry, goes ahead of
// those not handed yet.
func (r *asyncRun[In, Out]) start() {
	limit := r.a.currentLimit()
	raised := int64(limit) > r.a.limit.Swap(int64(limit))
	n := r.readyLen()
	if r.lanes != nil || r.a.first != nil || r.a.o.retry != nil {
		// Only what may run now: the rest waits here, where the next
		// free slot can still go to a level's turn, to ServeFirst's or to
		// a retry.
		n = min(n, limit-r.inFlight)
	}
	if n <= 0 {
		if raised && r.lanes == nil {
			r.pool.mu.Lock()
			r.pool.wake() // jobs queued for a slot may run now
			r.pool.mu.Unlock()
		}
		return
	}
	if r.lanes != nil {
		r.lanes.tick()
	}
	if r.inFlight == 0 && r.pool.fastAvg.Load() {
		r.runInline(min(n, limit), limit)
		return
	}
	// The jobs are taken off the ready queue before the pool's lock, and
	// go into its queue in one copy: every worker whose call returns
	// takes that lock for its next job, and while the stage held it for
	// up to a window of pops and pushes, a preemption of the stage's
	// thread there (a machine busy with other processes) stalled them all
	// (the lock's contention profile had the stage's unlock behind most
	// of the workers' waits).
	js := r.starting[:0]
	for range n {
		js = append(js, r.popReady(limit))
		r.inFlight++
	}
	r.pool.mu.Lock()
	r.pool.q.pushAll(js)
	r.pool.wake()
	r.pool.mu.Unlock()
	clear(js)
	r.starting = js[:0]
}

// letGo takes a job whose key lets it go: queued for a call slot, or, if
// SkipCall answered it, to complete in this round without one. A message
// that needs no call does not wait behind the calls queued for a slot
// (nor behind a higher level's: it takes no slot from them).
func (r *asyncRun[In, Out]) letGo(j *asyncJob[In, Out]) {
	if j.skipped {
		r.skipping = append(r.skipping, j)
		return
	}
	r.pushReady(j)
}

// pushReady queues a job ready to be called: ahead of the others (of its
// level, with Lanes) if ServeFirst picked it or it is a retry, which
// waited its turn once already.
func (r *asyncRun[In, Out]) pushReady(j *asyncJob[In, Out]) {
	if r.lanes != nil {
		r.lanes.push(j)
		return
	}
	if j.goesAhead() {
		r.readyAhead.push(j)
		return
	}
	r.ready.push(j)
}

// readyLen is how many jobs are ready to be called.
func (r *asyncRun[In, Out]) readyLen() int {
	if r.lanes != nil {
		return r.lanes.n
	}
	return r.readyAhead.len() + r.ready.len()
}

// popReady takes the next job to call when a slot is free under limit
// (at least one): the oldest (ServeFirst's and retries first), or with
// Lanes the one its level's turn says.
func (r *asyncRun[In, Out]) popReady(limit int) *asyncJob[In, Out] {
	if r.lanes != nil {
		return r.lanes.pop(limit-r.inFlight, limit)
	}
	if r.readyAhead.len() > 0 {
		return r.readyAhead.pop()
	}
	return r.ready.pop()
}

package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/stream"
)

// ErrCallTimeout is wrapped by the failure of a call that outlived
// CallTimeout.
var ErrCallTimeout = errors.New("sluice: call timed out")

// Async is the flow MapAsync returns. Its Stats can be read while it runs.
type Async[In, Out any] struct {
	parallelism int
	fn          func(context.Context, In) (Out, error)
	o           asyncOptions
	key         func(*stream.Message[In]) string
	err         error

	inFlight, waiting, limit atomic.Int64
	calls, failed, timeouts  atomic.Int64
	delayed                  atomic.Int64
	retries                  [len(reasons)]atomic.Int64
	exhausted, noBudget      atomic.Int64
}

// reasons are the retry reasons in the order of AsyncStats.Retries.
var reasons = [...]stream.Reason{stream.ReasonThrottled, stream.ReasonTimeout, stream.ReasonConnection,
	stream.ReasonBreakerOpen, stream.ReasonOther}

func reasonIndex(r stream.Reason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return len(reasons) - 1
}

// AsyncStats is a snapshot of an async stage.
type AsyncStats struct {
	// InFlight is the number of calls running; Waiting the messages held for
	// a call slot, a key, or in the reorder buffer; Limit the current cap on
	// calls in flight (parallelism, or lower with a limiter).
	InFlight, Waiting, Limit int64
	// Calls counts finished calls, Failed those that returned an error
	// (timeouts included), Timeouts those cut by CallTimeout.
	Calls, Failed, Timeouts int64
	// Delayed is the number of messages waiting for their next attempt.
	Delayed int64
	// Retries counts retries scheduled, by reason.
	Retries map[stream.Reason]int64
	// Exhausted counts messages whose transient failure outlasted the retry
	// policy; NoBudget retries refused by the retry budget.
	Exhausted, NoBudget int64
}

// MapAsync returns a flow that calls fn for each message on up to
// parallelism goroutines at once and emits each result with the message's
// envelope. By default results are emitted as calls finish (unordered, so
// one slow call holds back nothing); InOrder gives input order overall,
// MapAsyncByKey (or ByMessageKey) per key.
//
// fn gets a context that is cancelled when the pipeline stops (and after
// CallTimeout, counted from the call's start or, with TimeoutFromSend,
// from when fn says it sent its request: Sent, SentOnWrite); it must
// return when it is. An error fails the message to the failure stream, a
// panic too; stream.Fatal(err) ends the pipeline. A call cut short by the
// pipeline's own shutdown leaves its message unsettled, to be replayed. A panic in a function the options give for a
// message (the MapAsyncByKey key, Classifier, OnCall, OnRetry, OnDone, the
// WithLimiter limiter's Observe, the Breaker's OnStateChange) also fails
// just that message, with a *stream.PanicError, wherever it ran.
func MapAsync[In, Out any](parallelism int, fn func(context.Context, In) (Out, error), opts ...AsyncOption) *Async[In, Out] {
	a := &Async[In, Out]{parallelism: parallelism, fn: fn}
	for _, opt := range opts {
		opt(&a.o)
	}
	if a.o.window == 0 {
		a.o.window = 2 * max(parallelism, 1)
	}
	if k := a.o.keyFn; k != nil {
		a.key = func(m *stream.Message[In]) string { return k(&m.Envelope) }
	}
	if a.o.perPartition > 0 && a.key == nil {
		a.key = func(m *stream.Message[In]) string { return fmt.Sprint(m.Topic, "/", m.Partition) }
	}
	return a
}

// MapAsyncByKey is MapAsync that runs the calls of messages with the same
// key one at a time, in input order, and calls of different keys in
// parallel (parallel-consumer's KEY mode, Akka's mapAsyncPartitioned).
// Results of one key are emitted in input order; different keys
// interleave. A panic in key fails the message before it joins a key
// group. key is typed by the stage's input, so a key function of another
// type does not compile.
func MapAsyncByKey[In, Out any](parallelism int, key func(m *stream.Message[In]) string, fn func(context.Context, In) (Out, error),
	opts ...AsyncOption) *Async[In, Out] {
	a := MapAsync(parallelism, fn, opts...)
	if a.o.perPartition > 0 {
		a.key = nil // MaxPerPartition's own key; Validate refuses the pair
	}
	a.o.mode = perKey
	if key == nil {
		a.err = &stream.ConfigError{Stage: "mapasync", Argument: "key", Reason: "must not be nil"}
		return a
	}
	a.key = key
	return a
}

// Name returns "mapasync".
func (a *Async[In, Out]) Name() string { return "mapasync" }

// Validate reports bad arguments.
func (a *Async[In, Out]) Validate() error {
	bad := func(arg, reason string) error {
		return &stream.ConfigError{Stage: "mapasync", Argument: arg, Reason: reason}
	}
	switch {
	case a.err != nil:
		return a.err
	case a.fn == nil:
		return bad("fn", "must not be nil")
	case a.parallelism < 1:
		return bad("parallelism", fmt.Sprintf("must be at least 1, got %d", a.parallelism))
	case a.o.window < a.parallelism:
		return bad("Window", fmt.Sprintf("must be at least the parallelism %d, got %d", a.parallelism, a.o.window))
	case a.o.timeout < 0:
		return bad("CallTimeout", fmt.Sprintf("must not be negative, got %v", a.o.timeout))
	case a.o.perPartition < 0:
		return bad("MaxPerPartition", fmt.Sprintf("must not be negative, got %d", a.o.perPartition))
	case a.o.perPartition > 0 && a.o.mode == perKey:
		return bad("MaxPerPartition", "cannot be combined with a key (MapAsyncByKey, ByMessageKey)")
	}
	if a.o.retry != nil {
		if err := a.o.retry.Validate(); err != nil {
			return bad("Retry", err.Error())
		}
	}
	if v, ok := a.o.limiter.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return bad("WithLimiter", err.Error())
		}
	}
	return nil
}

// Stats returns a snapshot of the stage's counters.
func (a *Async[In, Out]) Stats() AsyncStats {
	st := AsyncStats{
		InFlight: a.inFlight.Load(), Waiting: a.waiting.Load(), Limit: a.limit.Load(),
		Calls: a.calls.Load(), Failed: a.failed.Load(), Timeouts: a.timeouts.Load(),
		Delayed: a.delayed.Load(), Exhausted: a.exhausted.Load(), NoBudget: a.noBudget.Load(),
		Retries: map[stream.Reason]int64{},
	}
	for i, r := range reasons {
		st.Retries[r] = a.retries[i].Load()
	}
	return st
}

// attemptTimeout is the bound on one call: the retry policy's, else
// CallTimeout's, else none.
func (a *Async[In, Out]) attemptTimeout() time.Duration {
	if a.o.retry != nil && a.o.retry.AttemptTimeout > 0 {
		return time.Duration(a.o.retry.AttemptTimeout)
	}
	return a.o.timeout
}

// currentLimit is the cap on calls in flight now.
func (a *Async[In, Out]) currentLimit() int {
	if a.o.limiter == nil {
		return a.parallelism
	}
	return max(1, min(a.parallelism, a.o.limiter.Limit()))
}

// Run runs the stage; see asyncRun.
func (a *Async[In, Out]) Run(ctx context.Context, in *stream.Inlet[In], out *stream.Outlet[Out]) error {
	callsCtx, stopCalls := context.WithCancel(ctx)
	r := &asyncRun[In, Out]{
		a: a, in: in, out: out, ctx: ctx, callsCtx: callsCtx,
		notify: make(chan struct{}, 1),
	}
	if a.o.mode == inOrder {
		r.ring = make([]*asyncJob[In, Out], a.o.window)
	}
	if a.key != nil {
		r.groups = map[string]*keyGroup[In, Out]{}
		r.groupCap = 1
		if a.o.perPartition > 0 {
			r.groupCap = a.o.perPartition
		}
	}
	r.pool = newWorkers(r, a.parallelism)
	if t := a.attemptTimeout(); t > 0 || a.o.fromSend {
		r.clock = newAttemptClock(callsCtx, t, a.o.fromSend)
	}
	if a.o.logger != nil {
		r.log = logx.NewLimited(a.o.logger, time.Second, 5)
	}
	defer func() {
		if r.timer != nil {
			r.timer.Stop()
		}
		// No call outlives the stage: cancel what still runs and wait.
		stopCalls()
		r.pool.close()
		if r.clock != nil {
			r.clock.stop()
		}
		a.inFlight.Store(0)
		a.waiting.Store(0)
	}()
	return r.loop()
}

type asyncJob[In, Out any] struct {
	seq      int64
	msg      stream.Message[In]
	key      string
	out      Out
	err      error
	done     bool
	inFlight int // calls in flight when it was handed to the workers

	attempts  int           // calls made
	first     time.Time     // when the first call started
	lastDelay time.Duration // the previous retry wait (decorrelated jitter)
	due       time.Time     // when a delayed job may run again
	class     stream.Classification

	breakerDone func(bool) // the breaker's, while a call's outcome is being reported
}

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

	held     int // jobs accepted and not yet emitted
	inFlight int
	nextSeq  int64
	ready    fifo[*asyncJob[In, Out]]
	groups   map[string]*keyGroup[In, Out]
	groupCap int
	ring     []*asyncJob[In, Out] // InOrder reorder buffer, by seq % window
	head     int64                // InOrder: next seq to emit

	mu     sync.Mutex
	doneQ  []*asyncJob[In, Out]
	spare  []*asyncJob[In, Out]
	notify chan struct{}
	free   []*asyncJob[In, Out]  // recycled jobs (stage goroutine only)
	slots  []stream.Message[Out] // free output slots being filled by emit
	filled int                   // how many of them are filled

	inline       []*asyncJob[In, Out] // scratch of runInline
	inlineCounts callCounts
	delayed      delayQueue[In, Out] // jobs waiting for their next attempt
	log          *logx.Limited
	clock        *attemptClock      // per-attempt timeouts, and send times (TimeoutFromSend), if any
	emitting     *asyncJob[In, Out] // the job whose OnDone runs
	timer        *time.Timer
	timerAt      time.Time
}

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
		r.a.waiting.Store(int64(r.held - r.inFlight))
		if inputDone && r.held == 0 {
			return nil
		}
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
	var j *asyncJob[In, Out]
	if n := len(r.free); n > 0 {
		// A recycled job: set each field rather than zero the whole struct
		// and copy the message twice.
		j, r.free = r.free[n-1], r.free[:n-1]
		var zero Out
		j.out, j.err, j.done, j.key = zero, nil, false, ""
		j.attempts, j.first, j.lastDelay = 0, time.Time{}, 0
	} else {
		j = new(asyncJob[In, Out])
	}
	j.seq, j.msg = r.nextSeq, *m
	r.nextSeq++
	r.held++
	if r.ring != nil {
		r.ring[j.seq%int64(len(r.ring))] = j
	}
	if r.groups == nil {
		r.ready.push(j)
		return
	}
	j.key = key
	g := r.groups[key]
	if g == nil {
		g = &keyGroup[In, Out]{}
		r.groups[j.key] = g
	}
	if g.running < r.groupCap {
		g.running++
		r.ready.push(j)
	} else {
		g.waiting.push(j)
	}
}

// start hands ready jobs to the workers while the limit allows.
func (r *asyncRun[In, Out]) start() {
	limit := r.a.currentLimit()
	r.a.limit.Store(int64(limit))
	n := min(limit-r.inFlight, r.ready.len())
	if n <= 0 {
		return
	}
	if r.inFlight == 0 && r.pool.fastAvg.Load() {
		r.runInline(n)
		return
	}
	r.pool.mu.Lock()
	for range n {
		j := r.ready.pop()
		r.inFlight++
		j.inFlight = r.inFlight
		r.pool.q.push(j)
	}
	r.pool.wake()
	r.pool.mu.Unlock()
	r.a.inFlight.Store(int64(r.inFlight))
}

// callCounts accumulates a worker's counters between two flushes, so that
// workers do not contend on shared atomics once per call.
type callCounts struct{ calls, failed, timeouts int64 }

func (c *callCounts) flush(a interface {
	add(calls, failed, timeouts int64)
}) {
	if c.calls > 0 {
		a.add(c.calls, c.failed, c.timeouts)
		*c = callCounts{}
	}
}

func (a *Async[In, Out]) add(calls, failed, timeouts int64) {
	a.calls.Add(calls)
	if failed > 0 {
		a.failed.Add(failed)
	}
	if timeouts > 0 {
		a.timeouts.Add(timeouts)
	}
}

// call makes one attempt of j's call, starting at now (read by the
// caller, once for a chunk of calls run back to back), and returns when it
// ended: one clock read per call serves the retry budget's start, the
// attempt's deadline, the limiter's latency and the workers' average.
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
	var done func(bool)
	if a.o.breaker != nil {
		var err error
		if done, err = a.o.breaker.Allow(); err != nil {
			// Refused: no call is made, the message fails fast, and its
			// retry waits for the breaker.
			counts.failed++
			j.err, j.class = err, r.classify(err)
			return now
		}
		j.breakerDone = done // for callPanicked, should the classifier panic
	}
	ctx := r.callsCtx
	var finish func() time.Time // ends the call's context; returns its send time
	if r.clock != nil {
		ctx, finish = r.clock.start(now)
	}
	j.out, j.err = safeCall(ctx, a.fn, j.msg.Value)
	timedOut := false
	// Cause rather than Err: a call timed from its send on the fallback
	// contexts is cancelled with the cause DeadlineExceeded (stdSent).
	if j.err != nil && r.clock != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) && r.callsCtx.Err() == nil {
		timedOut = true
		j.err = fmt.Errorf("%w after %v: %w", ErrCallTimeout, r.clock.timeout, j.err)
	}
	var sent time.Time // when the call said it was sent, if it did (TimeoutFromSend)
	if finish != nil {
		sent = finish()
	}
	counts.calls++
	if j.err != nil {
		counts.failed++
	}
	if timedOut {
		counts.timeouts++
	}
	// From here on, user callbacks run: a panic in one is caught by
	// callFrom and fails the message (callPanicked).
	if j.err != nil {
		j.class = r.classify(j.err)
	}
	if done != nil {
		j.breakerDone = nil
		done(j.err == nil || !j.class.Transient)
	}
	end = time.Now()
	if !timed {
		return end
	}
	lat, wait := end.Sub(now), time.Duration(0)
	if !sent.IsZero() {
		lat, wait = end.Sub(sent), max(0, sent.Sub(now))
	}
	if a.o.limiter != nil {
		a.o.limiter.Observe(backpressure.Sample{Latency: lat, InFlight: j.inFlight, Dropped: timedOut})
	}
	if a.o.onCall != nil {
		a.o.onCall(CallInfo{Latency: lat, Wait: wait, InFlight: j.inFlight, Err: j.err})
	}
	return end
}

func (r *asyncRun[In, Out]) classify(err error) stream.Classification {
	if r.a.o.classify != nil {
		return r.a.o.classify(err)
	}
	return stream.Classify(err)
}

// runInline runs up to n ready calls on the stage goroutine, one after the
// other: when calls take less than handing them to a worker would, this is
// the fastest way to run them. Their results are handled as if a worker had
// run them, and their durations keep the average current, so that once
// calls slow down the stage goes back to its workers.
func (r *asyncRun[In, Out]) runInline(n int) {
	timed := r.a.o.limiter != nil || r.a.o.onCall != nil
	batch := r.inline[:0]
	for range min(n, 256) {
		j := r.ready.pop()
		r.inFlight++
		j.inFlight = r.inFlight
		batch = append(batch, j)
	}
	t0 := time.Now()
	t := r.callChunk(batch, timed, &r.inlineCounts, t0)
	el := float64(t.Sub(t0))
	r.inlineCounts.flush(r.a)
	r.pool.mu.Lock()
	r.pool.observe(el, len(batch))
	r.pool.mu.Unlock()
	r.finished(batch)
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

// complete handles the calls that finished since last time and emits what
// may be emitted. It returns how many calls it handled.
func (r *asyncRun[In, Out]) complete() (int, error) {
	r.mu.Lock()
	done := r.doneQ
	r.doneQ = r.spare[:0]
	r.mu.Unlock()
	defer func() { r.spare = done[:0] }()
	r.inFlight -= len(done)
	// i == len(done): the jobs are handled, emit what the reorder ring
	// lets go. completeFrom returns past that when all is done.
	for i := 0; i <= len(done); {
		next, err := r.completeFrom(done, i)
		if err != nil {
			return 0, err
		}
		i = next
	}
	r.a.inFlight.Store(int64(r.inFlight))
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
			r.ready.push(g.waiting.pop())
		} else if g.running--; g.running == 0 {
			delete(r.groups, j.key)
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
	j.msg.Attempt = int32(j.attempts)
	if r.a.o.onDone != nil && j.attempts > 0 {
		r.emitting = j // for completeFrom, should OnDone panic
		r.a.o.onDone(DoneInfo{Attempts: j.attempts, Total: time.Since(j.first), Err: j.err})
		r.emitting = nil
	}
	return r.hand(j)
}

// hand passes on the outcome of a job taken out of the stage (see emit).
func (r *asyncRun[In, Out]) hand(j *asyncJob[In, Out]) error {
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
	if r.callsCtx.Err() != nil && !errors.Is(j.err, ErrCallTimeout) {
		return nil
	}
	return r.in.FailWith(r.ctx, j.msg, stream.Failure{Err: j.err, Attempts: j.attempts, FirstFailure: j.first,
		Transient: j.class.Transient})
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

// fifo is a queue that reuses its backing array.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && (q.head == len(q.items) || q.head >= cap(q.items)/2) {
		// Reuse the consumed front instead of growing.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, v)
}

func (q *fifo[T]) pop() T {
	v := q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	return v
}

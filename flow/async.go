package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

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
	skip        func(In) (Out, bool) // SkipCall's
	first       func(In) bool        // ServeFirst's
	o           asyncOptions
	key         func(*stream.Message[In]) string
	err         error

	meters   atomic.Pointer[[]asyncMeter] // the histograms of each registration (Instrument)
	adaptive *adaptiveTimeout             // the policy's TimeoutFactor's, if set

	inFlight, waiting, limit         atomic.Int64
	calls, failed, timeouts, refused atomic.Int64
	delayed                          atomic.Int64
	retries                          [len(reasons)]atomic.Int64
	exhausted, noBudget              atomic.Int64
	skipped                          atomic.Int64
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
	if a.o.skip != nil {
		skip, ok := a.o.skip.(func(In) (Out, bool))
		if !ok {
			a.err = &stream.ConfigError{Stage: "map-async", Argument: "SkipCall", Reason: fmt.Sprintf("is a %T, the stage needs a func(%v) (%v, bool)",
				a.o.skip, reflect.TypeFor[In](), reflect.TypeFor[Out]())}
		}
		a.skip = skip
	}
	if a.o.first != nil {
		first, ok := a.o.first.(func(In) bool)
		if !ok {
			a.err = &stream.ConfigError{Stage: "map-async", Argument: "ServeFirst", Reason: fmt.Sprintf("is a %T, the stage needs a func(%v) bool",
				a.o.first, reflect.TypeFor[In]())}
		}
		a.first = first
	}
	if k := a.o.keyFn; k != nil {
		a.key = func(m *stream.Message[In]) string { return k(&m.Envelope) }
	}
	if a.o.perPartition > 0 && a.key == nil {
		a.key = func(m *stream.Message[In]) string { return fmt.Sprint(m.Topic, "/", m.Partition) }
	}
	if p := a.o.retry; p != nil && p.TimeoutFactor > 0 && a.attemptTimeout() > 0 {
		a.adaptive = newAdaptiveTimeout(p.TimeoutFactor, a.attemptTimeout(), p.LongestAttemptTimeout())
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
		a.err = &stream.ConfigError{Stage: "map-async-by-key", Argument: "key", Reason: "must not be nil"}
		return a
	}
	a.key = key
	return a
}

// Name returns "map-async", or "map-async-by-key" for MapAsyncByKey.
func (a *Async[In, Out]) Name() string {
	if a.o.mode == perKey {
		return "map-async-by-key"
	}
	return "map-async"
}

// Validate reports bad arguments.
func (a *Async[In, Out]) Validate() error {
	bad := func(arg, reason string) error {
		return &stream.ConfigError{Stage: a.Name(), Argument: arg, Reason: reason}
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
	if a.o.lanes != nil {
		if arg, reason := a.o.lanes.validate(a.parallelism); arg != "" {
			return bad(arg, reason)
		}
	}
	switch {
	case a.o.laneDrain < 0:
		return bad("LaneScaling", fmt.Sprintf("the drain time must not be negative, got %v", a.o.laneDrain))
	case a.o.lanes == nil && (a.o.laneDrain != 0 || a.o.laneBacklog != nil):
		return bad("LaneScaling", "needs Lanes: it estimates workers by level")
	}
	return nil
}

// attemptTimeout is the bound on one call: CallTimeout's, else the retry
// policy's AttemptTimeout, else none. The stage's own option wins: it is
// the one written for this stage's calls, where a policy (Interactive's
// 500 ms, a file's) is shared by many.
func (a *Async[In, Out]) attemptTimeout() time.Duration {
	if a.o.timeout > 0 {
		return a.o.timeout
	}
	if a.o.retry != nil {
		return a.o.retry.AttemptTimeout
	}
	return 0
}

// AttemptTimeout is the timeout a first attempt that starts now gets:
// CallTimeout, else the Retry policy's AttemptTimeout (0: none), or, with
// the policy's TimeoutFactor, the timeout the service's recent latency
// calls for. It tells a caller how long a call may take at most, to weigh
// it against a deadline.
func (a *Async[In, Out]) AttemptTimeout() time.Duration {
	if a.adaptive != nil {
		return a.adaptive.timeout(0)
	}
	return a.attemptTimeout()
}

// noteTimeoutOverride logs, once per Run, that CallTimeout overrides a
// different AttemptTimeout of the retry policy, so that the policy's value
// is not ignored unseen.
//
// It also says when no retry can fit: a retry is scheduled only if the
// next attempt, given its whole timeout, can end within the policy's
// MaxElapsed, so a CallTimeout as long as MaxElapsed (less BaseDelay)
// turns the first transient error into the message's failure.
func (a *Async[In, Out]) noteTimeoutOverride(ctx context.Context, l *slog.Logger) {
	p := a.o.retry
	if p == nil || a.o.timeout <= 0 {
		return
	}
	if p.MaxAttempts > 1 && p.MaxElapsed > 0 && a.o.timeout+p.BaseDelay >= p.MaxElapsed {
		l.WarnContext(ctx, "no retry fits: CallTimeout plus the policy's base delay reaches its max elapsed time, so a transient failure is final at once",
			slog.Duration("call_timeout", a.o.timeout), slog.Duration("base_delay", p.BaseDelay), slog.Duration("max_elapsed", p.MaxElapsed))
	}
	if p.AttemptTimeout <= 0 || p.AttemptTimeout == a.o.timeout {
		return
	}
	l.WarnContext(ctx, "CallTimeout overrides the retry policy's attempt timeout",
		slog.Duration("call_timeout", a.o.timeout), slog.Duration("policy_attempt_timeout", a.o.retry.AttemptTimeout))
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
	r.onCall, r.onDone = a.hooks()
	r.tracer = newAsyncTracer(in.TracerProvider(), in.Stage())
	if a.o.lanes != nil {
		r.lanes = newLanes[In, Out](a.o.lanes, a.meters.Load())
	}
	r.pool = newWorkers(r, a.parallelism)
	if t := a.attemptTimeout(); t > 0 || a.o.fromSend {
		r.clock = newAttemptClock(callsCtx, t, a.o.fromSend, a.adaptive)
	}
	r.clocked = r.onCall != nil || r.onDone != nil || a.o.limiter != nil || a.o.retry != nil || a.o.budget != nil ||
		a.o.breaker != nil || r.clock != nil || r.lanes != nil
	logger := a.o.logger
	if logger == nil {
		logger = in.Logger()
	}
	a.noteTimeoutOverride(ctx, logger)
	r.log = logx.NewLimited(logger, time.Second, 5)
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
		if r.lanes != nil {
			r.lanes.stopped()
		}
		if r.tracer != nil {
			r.tracer.stopped()
		}
	}()
	return r.loop()
}

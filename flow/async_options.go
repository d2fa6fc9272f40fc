package flow

import (
	"log/slog"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// AsyncOption configures MapAsync.
type AsyncOption func(*asyncOptions)

type asyncMode int

const (
	unordered asyncMode = iota
	inOrder
	perKey
)

type asyncOptions struct {
	retry        *RetryPolicy
	budget       *backpressure.RetryBudget
	breaker      *backpressure.Breaker
	classify     func(error) stream.Classification
	onRetry      func(RetryInfo)
	onDone       func(DoneInfo)
	logger       *slog.Logger
	mode         asyncMode
	keyFn        func(*stream.Envelope) string // ByMessageKey
	perPartition int
	timeout      time.Duration
	fromSend     bool
	limiter      backpressure.Limiter
	window       int
	onCall       func(CallInfo)
	lanes        *laneConfig
	laneDrain    time.Duration
	laneBacklog  func(level int) int64
	skip         any // SkipCall's func(In) (Out, bool), checked by MapAsync
	first        any // ServeFirst's func(In) bool, checked by MapAsync
}

// InOrder emits results in input order (Akka's mapAsync): calls still run
// concurrently, and results that finish early wait in a reorder buffer of
// Window messages. One slow call holds back every result behind it — a
// service's long tail — so prefer the default, unordered, unless order
// matters. Default: unordered, results leave as their calls finish.
func InOrder() AsyncOption { return func(o *asyncOptions) { o.mode = inOrder } }

// ByMessageKey is MapAsyncByKey on the message's Key (its Kafka record
// key), as an option. Default: no key, calls of any messages run at once.
func ByMessageKey() AsyncOption {
	return func(o *asyncOptions) { o.mode, o.keyFn = perKey, messageKey }
}

func messageKey(e *stream.Envelope) string { return string(e.Key) }

// MaxPerPartition lets no source partition have more than n calls in flight
// in this stage; messages of a partition at its cap wait (inside the
// window) while other partitions' messages go ahead. Not combined with
// a key (MapAsyncByKey, ByMessageKey), which already allows one call per key.
// Default: 0, no cap per partition (only the parallelism and Window).
func MaxPerPartition(n int) AsyncOption { return func(o *asyncOptions) { o.perPartition = n } }

// CallTimeout cancels each call's context after d; the message fails with
// an error wrapping ErrCallTimeout (and context.DeadlineExceeded). Default:
// no per-call timeout, or the Retry policy's AttemptTimeout if it has one.
// The clock starts when the call starts, or, with TimeoutFromSend, when it
// says it sent its request.
//
// CallTimeout wins over the Retry policy's AttemptTimeout, whatever the
// order of the options: it is written for this stage's calls, where a
// policy (Interactive's 500 ms, a file's) is shared. When both are set and
// differ, Run logs a warning naming both, to the stage's logger
// (WithLogger, or the pipeline's); set the policy's AttemptTimeout to 0 (or
// to d) to say the override is meant. A retry is scheduled only if the next
// attempt, with its whole timeout, can end within the policy's MaxElapsed:
// a CallTimeout near MaxElapsed leaves no retry, and Run warns of it too.
func CallTimeout(d time.Duration) AsyncOption { return func(o *asyncOptions) { o.timeout = d } }

// TimeoutFromSend starts each attempt's clock — its timeout (CallTimeout, or
// the Retry policy's AttemptTimeout) and its latency — when the call says
// its request was sent (Sent, or SentOnWrite for an HTTP request), not when
// the call starts. An attempt's timeout then measures the service, not the
// worker's own queueing before the send (a connection from a full pool, a
// CPU on a saturated machine): a busy worker makes requests wait, it does
// not fail them. The latency OnCall (CallInfo.Latency) and the WithLimiter
// limiter (backpressure.Sample.Latency) see is likewise the service's, from
// send to return; CallInfo.Wait gives the wait before the send. The Retry
// policy's MaxElapsed still counts from the first attempt's start: it is the
// latency the message's sender sees.
//
// A call that never says it was sent has no attempt timeout: it runs until
// it returns or the pipeline stops (its context ends then, as every call's
// does), and its latency is measured from its start. Bound what it does
// before sending by other means if that needs a bound: SentOnWriteWithin
// for an HTTP call (a bound of the whole call, which the stage's clock
// keeps; an http.Client's Timeout does the same at the cost of two
// goroutines a request when its transport is a wrapper), a dial timeout.
//
// Default: off, the clock starts when the call starts: a call must say
// when it sent for this option to be safe, and one that does not would
// lose its timeout.
func TimeoutFromSend() AsyncOption { return func(o *asyncOptions) { o.fromSend = true } }

// WithLimiter lets l lower the number of calls in flight below the stage's
// parallelism, e.g. a backpressure.Adaptive limiter that holds a latency
// target. Default: the parallelism is the limit. l observes each call's
// latency as OnCall does (from its send with TimeoutFromSend), except a
// call that failed before reaching its service (stream.NotCalled). A panic in
// l.Observe fails the message of the call it observed.
func WithLimiter(l backpressure.Limiter) AsyncOption { return func(o *asyncOptions) { o.limiter = l } }

// Window sets how many messages the stage may hold at once: calls in
// flight, messages waiting for a call slot or a key, and results waiting to
// be emitted (default: 2 x parallelism). It bounds the stage's memory and,
// in InOrder mode, the reorder buffer.
func Window(n int) AsyncOption { return func(o *asyncOptions) { o.window = n } }

// OnCall registers a function called after every call, from the goroutine
// that ran it, for metrics (latency histograms, error counts). A panic in
// fn fails the message of that call. Default: none.
func OnCall(fn func(CallInfo)) AsyncOption { return func(o *asyncOptions) { o.onCall = fn } }

// CallInfo describes one finished call.
type CallInfo struct {
	// Latency is from the call's start to its return or, for a call that
	// said it was sent (Sent) in a stage with TimeoutFromSend, from its
	// send to its return: the service's latency.
	Latency time.Duration
	// Wait is, with TimeoutFromSend, the time from the call's start to its
	// send: the worker's own queueing (0 for a call that did not say it
	// was sent, and without the option).
	Wait     time.Duration
	InFlight int // calls in flight when it started, itself included
	Err      error
	// NotCalled says the call failed before reaching its service (Err was
	// marked with stream.NotCalled, or the stage's classifier said so):
	// its latency is not the service's. The stage's call histogram leaves
	// it out.
	NotCalled bool
	// TraceID is, in a traced pipeline (stream.WithTracerProvider), the
	// trace id of the call's message (32 hex digits) if its trace is
	// sampled; "" otherwise. The stage's call histogram keeps it as an
	// exemplar.
	TraceID string
}

// SkipCall gives the result of a message that needs no call, its work
// done before (a step a replayed request did before it was parked, say):
// when fn reports true, the message leaves with fn's result and no call
// is made. Nothing that tells of the service hears of it: the Breaker
// neither counts it nor refuses it, the limiter, adaptive timeouts, retry
// Budget, call statistics, OnCall and OnDone see nothing, and the
// message leaves with Attempt 0. fn runs on the stage's goroutine as the
// message enters the stage, and must be quick; a panic in it fails the
// message. Needing no call, the message waits for no call slot: it
// leaves at once, ahead of the calls waiting for one (a higher level's
// too: it takes nothing from them), except that it still takes its key's
// turn (ByMessageKey, MaxPerPartition) and, InOrder, its place in input
// order, so that skipping changes no order that is kept. The lanes count
// it only in Done (not in Waiting, InFlight, Started, Busy or
// DesiredWorkers). Its types must be the stage's, which the compiler
// cannot check (options are not typed by the stage): Validate, and the
// graph's start, name the mismatch.
func SkipCall[In, Out any](fn func(In) (Out, bool)) AsyncOption {
	return func(o *asyncOptions) { o.skip = fn }
}

// ServeFirst calls the messages fn picks before the others waiting for a
// call slot, in their arrival order, as retries are (see Retry). Use it
// for messages that have waited their turn once already, such as
// requests replayed after a parking, which would otherwise wait again
// behind a whole window of fresh ones; pick few, since the others wait
// for as long as picked ones keep coming. What order remains: with
// Lanes, a picked message goes before the others of its level, never
// before a higher level's; it still waits for its key (ByMessageKey,
// MaxPerPartition); and InOrder still emits in input order, so that with
// it only the order of calls changes. fn runs on the stage's goroutine as the
// message enters the stage, and must be quick; a panic in it fails the
// message. Its type must take the stage's input, which the compiler
// cannot check: Validate, and the graph's start, name the mismatch.
// Default: every message in arrival order.
func ServeFirst[In any](fn func(In) bool) AsyncOption {
	return func(o *asyncOptions) { o.first = fn }
}

// Retry retries calls that fail transiently (the policy's Classify: its
// TransientStatus decides HTTP statuses; or the function given to
// Classifier) as p says. A message waiting for its next attempt holds no
// worker: it sits in a timer-ordered queue that counts against Window (so
// backpressure still holds) but not against the parallelism; when its
// wait ends, it is called before the messages waiting for a slot (with
// Lanes, those of its level), as ServeFirst's are: it waited its turn
// once already, and its time in the queue would count against
// MaxElapsed. When attempts, MaxElapsed or the retry budget run out, the
// message fails with Failure.Transient set, for a parking sink to keep and
// replay it; permanent errors fail at once. Default: no retry, a failed
// call fails its message at once (transient or not).
func Retry(p RetryPolicy) AsyncOption { return func(o *asyncOptions) { o.retry = &p } }

// Budget limits retries to a share of requests (see
// backpressure.RetryBudget); share one budget among the stages that call
// the same dependency. Default: no budget, retries are bounded by the Retry
// policy alone.
func Budget(b *backpressure.RetryBudget) AsyncOption { return func(o *asyncOptions) { o.budget = b } }

// Breaker asks b before each call: while it is open, calls fail fast with a
// transient *backpressure.OpenError whose wait a retry honours. Transient
// failures count against the dependency's health; permanent ones (a
// rejected request) do not, and failures marked stream.NotCalled (the call
// function gave up before reaching the dependency) count neither way: a
// half-open breaker's probe that ends so leaves its slot to another call.
// Default: no breaker, every call is made.
func Breaker(b *backpressure.Breaker) AsyncOption { return func(o *asyncOptions) { o.breaker = b } }

// Classifier replaces stream.Classify for this stage. A panic in fn fails
// the message whose error it classified, for good (no retry). Default:
// the Retry policy's Classify, or stream.Classify without one.
func Classifier(fn func(error) stream.Classification) AsyncOption {
	return func(o *asyncOptions) { o.classify = fn }
}

// OnRetry registers a function told of every retry scheduled (for logs and
// metrics: retries by reason). A panic in fn fails the message instead of
// retrying it. Default: none.
func OnRetry(fn func(RetryInfo)) AsyncOption { return func(o *asyncOptions) { o.onRetry = fn } }

// OnDone registers a function told, for every message, how many attempts
// it took and how long from its first attempt to its outcome (for the
// histograms of total time including retries and of attempts per message).
// A panic in fn fails that message, even one whose call succeeded.
// Default: none.
func OnDone(fn func(DoneInfo)) AsyncOption { return func(o *asyncOptions) { o.onDone = fn } }

// WithLogger sets the logger of the stage's retries (default: the
// pipeline's, stream.WithLogger). Each retry scheduled is logged as a
// warning (with the reason, attempt, wait and error), at most a few lines a
// second per reason, each saying how many like it were suppressed.
// Permanent failures are logged as errors by the dead letter that records
// them.
func WithLogger(l *slog.Logger) AsyncOption { return func(o *asyncOptions) { o.logger = l } }

// RetryInfo describes a retry being scheduled.
type RetryInfo struct {
	Attempt int // the attempt that failed (1 = the first call)
	Reason  stream.Reason
	Delay   time.Duration
	Err     error
}

// DoneInfo describes a message's outcome in an async stage.
type DoneInfo struct {
	Attempts int
	Total    time.Duration
	Err      error // nil on success
}

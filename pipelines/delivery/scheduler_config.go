package delivery

import (
	"go.opentelemetry.io/otel/trace"

	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// SchedulerConfig wires the scheduler to its source, services and topics.
type SchedulerConfig struct {
	// Source reads delivery requests; Committer commits what is settled
	// (a *kafka.Source is both). All levels of priority share the topic
	// then: each request is served at its own priority's level, Normal
	// until check_account says its owner's tier if it has none.
	Source    stream.Source[[]byte]
	Committer stream.Committer
	// Levels, in place of Source, reads the requests from one source per
	// level of priority, highest first (High, Normal, Low: a kafka.Source
	// of each level's topic), merged by source.Priority under Policy, so
	// that a higher level is received sooner and a lower one takes the
	// lag. Committer must then commit for all of them; left nil, it is
	// the levels' sources' own (each a stream.Committer, as a kafka.Source
	// is), joined by stream.Committers. A request is served at its topic's level
	// until check_account, and at PriorityOf's after it: its own priority,
	// or its owner's tier.
	Levels []source.Level[[]byte]
	// Policy is how source.Priority shares the reading among Levels
	// (default DefaultPolicy: weighted 6:3:1).
	Policy backpressure.Priority
	// Reserve is, per level, the calls in flight each step keeps for that
	// level while it has requests waiting; a level with none waiting lends
	// its share (flow.Lanes, strict between levels: a queued call never
	// starts while a higher level's waits, beyond those reservations).
	// Default DefaultReserve, scaled down to fit Parallelism.
	Reserve []int
	// LevelStats, if set, counts the requests that complete by level, with
	// their end-to-end latencies.
	LevelStats *LevelStats
	// Buffer is the capacity of the pipes between the stages, in messages
	// (default DefaultBuffer, or half the Parallelism if less, 16 at
	// least).
	Buffer int
	// Backends are the services the steps call.
	Backends Backends
	// Producer writes compensation events (requests that failed for good,
	// at any step or before the first) to FailuresTopic, malformed and
	// invalid requests to DeadLetterTopic, and parked requests to
	// ParkTopic: a *kgo.Client (franz-go's idempotent producer, its
	// default), or a sink/redisstream Producer, which appends each record
	// to the Redis stream of its topic's name.
	Producer                       kafkasink.Producer
	FailuresTopic, DeadLetterTopic string
	// ParkTopic, with Replay and ReplayCommitter (a *kafka.Source reading
	// ParkTopic in a consumer group of its own), parks the requests whose
	// transient failure outlasted their retries — a service down or
	// throttling for longer than the latency budget — and replays them
	// when due, from the start (steps already done are skipped or redone
	// idempotently). Only after MaxParkings parkings does such a failure
	// count as permanent: the request is then compensated. Default: no
	// parking; such a request is compensated at once.
	ParkTopic       string
	Replay          stream.Source[[]byte]
	ReplayCommitter stream.Committer
	// ReplayAfter is the first replay delay (default 2 s), doubled with
	// each parking up to MaxReplayDelay (default 1 min); a longer wait the
	// service asked for (Retry-After) is honoured, a shorter one taken if
	// the request's deadline leaves no more. A request parked because its
	// step's service was down (the step's breaker opened) is replayed as
	// soon as the breaker closes again — a call to the service, a new
	// request's or a replay's, went through — whatever its time.
	ReplayAfter, MaxReplayDelay time.Duration
	// A request is parked and replayed for as long as it can still
	// complete before its deadline: the replay must leave it the time its
	// steps take (the sum of their attempt timeouts). Past that, its
	// transient failure is final and it is compensated, its reason
	// wrapping ErrDeadline. A request without a deadline has one
	// DefaultHorizon after its first failure (default 1 h).
	DefaultHorizon time.Duration
	// MaxParkings, if positive, also bounds the parkings of a request: its
	// next transient failure is final, wrapping ErrOutOfParkings (default
	// 0: only the deadline bounds them).
	MaxParkings int
	// Parallelism caps the calls of each step in flight (default
	// DefaultParallelism); each step's adaptive limit keeps them as low as
	// its service needs.
	Parallelism int
	// Retry is the policy of every step (default DefaultRetry). It must
	// have an AttemptTimeout.
	Retry *flow.RetryPolicy
	// Metrics, if set, receives the pipeline's metrics: the scheduler
	// registers its pipeline (observe.Metrics.Register).
	Metrics *observe.Metrics
	// Observer, if set, is told the engine's measurements too (beside
	// Metrics, if set).
	Observer stream.Observer
	// TracerProvider, if set, traces each request through the pipeline
	// (stream.WithTracerProvider): the sources' receive spans, a span per
	// step's call and, with HTTPBackends, a span per HTTP attempt, the
	// trace continued from the request's traceparent header and carried
	// into its parkings and dead letters. Default nil: no tracing.
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	// DrainTimeout bounds the drain on cancel (default 10s).
	DrainTimeout time.Duration
	// Steps, with NonIdempotent, records the completion of the named steps
	// so that a replayed request skips them (for backends that cannot be
	// made idempotent). Default: none; every step relies on PUT semantics.
	Steps         StepStore
	NonIdempotent []Step
	// StaleAfter is how long a non-idempotent call may be in flight at its
	// service (default 10 s, well beyond any attempt's timeout: a copy
	// cuts its own call at StaleAfter/2): a step started longer ago by a
	// copy that never recorded its outcome (killed mid-call, or its call
	// went unanswered) is resolved by asking the service (the drone
	// service's Booking): done, it is recorded; not done, this copy calls
	// it. Until then the request waits, parked until the mark is stale.
	// With recorded steps it must be at least MinStaleAfter(Retry):
	// NewScheduler refuses less (CheckStaleAfter).
	StaleAfter time.Duration
	// MaxStoreOutage is how long a recorded step waits for an unreachable
	// step store (Redis) before the scheduler stops with an error naming
	// it (default 2 min). Meanwhile requests wait at that step — its calls
	// hold their slots, the pipes fill and the source stops fetching —
	// rather than fail: a blip costs lag, not cancellations.
	MaxStoreOutage time.Duration
	// LatencyTarget is the p99 call latency each step's adaptive
	// concurrency limit holds (default 100 ms: a fifth of the 500 ms
	// budget). The latency is the service's, from each request's send to
	// its answer (the steps are timed from the send), so the limit follows
	// the service, not this process's own queueing; it starts at 64 calls
	// and stays between 8 and Parallelism.
	LatencyTarget time.Duration
}

// DefaultLatencyTarget is SchedulerConfig.LatencyTarget's default: a
// fifth of the 500 ms budget of a request's calls.
const DefaultLatencyTarget = 100 * time.Millisecond

// The bounds of a step's adaptive limit below Parallelism: it starts at
// initialLimit (slow start doubles it within a few windows where the
// service keeps up) and never drops under minLimit, so that one slow
// window cannot starve a step.
const (
	initialLimit = 64
	minLimit     = 8
)

// breakerMaxOpen bounds how long a step's breaker stays open between
// probes while its service stays down (the open time doubles from 1 s):
// once the service is back, it is found within this, and the requests
// parked because of it are replayed at once.
const breakerMaxOpen = 5 * time.Second

// judgeCalls is the calls in flight of judge-failures (Deliveries.State).
const judgeCalls = 64

// MaxCalls is the most calls to the backends a scheduler of the given
// parallelism has in flight at once: every step's, and judge-failures'.
// Size an HTTP client's connections to it (NewHTTPClient).
func MaxCalls(parallelism int) int { return len(Steps)*parallelism + judgeCalls }

// DefaultParallelism caps the calls of a step in flight; the adaptive
// limit, not the cap, decides how many there are (from 64 at start, between
// 8 and the cap). Little's law sizes the cap: peaks of 50,000
// requests a second at the simulated services' 2-10 ms need about 300
// calls of each step in flight, and twice the 6 ms mean again for slower
// moments makes about 600; 1,024 leaves that room. A worker's connections
// follow the limit, not the cap (NewHTTPClient opens them as calls need
// them, up to MaxCalls), so a high cap costs nothing while unused. On a
// small machine the cap matters little: at 1,000 requests a second and
// 5 ms, each step needs 5 calls in flight.
const DefaultParallelism = 1024

// DefaultPolicy reads the levels weighted 6:3:1 (backpressure.
// WeightedPriority). Under overload every level keeps a share: high, a
// tenth of the requests in the load generator's mix, has six tenths of the
// reading whenever it has requests, so it never waits behind the others,
// and low has a tenth at least, so it is slowed, never starved. Strict
// order with aging (backpressure.StrictPriority(3).Aging(...)) serves
// high first as well but leaves low nothing until its requests have aged
// past their MaxWait (counted from when they were read, or from the
// broker's append time on a LogAppendTime topic, where the lag counts
// too); past that, aged low requests are served as high, oldest first,
// and high waits behind them: aging trades priority for bounded waits,
// which suits short bursts, not a sustained overload.
func DefaultPolicy() backpressure.Priority { return backpressure.WeightedPriority(6, 3, 1) }

// DefaultReserve is the calls in flight each step keeps for each level
// while it has requests waiting (SchedulerConfig.Reserve): enough that
// normal and low always progress inside a step, few enough beside the
// adaptive limit (64 at start) that high takes the rest.
var DefaultReserve = []int{16, 8, 8}

// DefaultBuffer is the capacity of the scheduler's pipes: two batches.
// A pipe is first in, first out whatever the levels, so a high request
// waits behind all it holds; the steps' windows (twice the parallelism)
// hold the rest of what is in flight, served by level, and the backlog
// beyond stays in Kafka, where the priority source reads high first. At
// 40,000 requests a second on 2 cores, 512 rather than the engine's 4,096
// took high's p99 from 841 to 601 ms at the same throughput. With few
// calls in flight a step's window is small, and 512 would put most of
// what waits in the pipes, in the order it was read: the default is then
// half the parallelism (a quarter of a step's window), 16 at least.
const DefaultBuffer = 512

// DefaultHorizon is SchedulerConfig.DefaultHorizon's default: how long
// after its first failure a request without a deadline may still be
// replayed.
const DefaultHorizon = time.Hour

// setDefaults fills in the fields left zero.
func (cfg *SchedulerConfig) setDefaults() {
	if cfg.Parallelism == 0 {
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.LatencyTarget == 0 {
		cfg.LatencyTarget = DefaultLatencyTarget
	}
	if cfg.Retry == nil {
		p := DefaultRetry()
		cfg.Retry = &p
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReplayAfter == 0 {
		cfg.ReplayAfter = 2 * time.Second
	}
	if cfg.MaxReplayDelay == 0 {
		cfg.MaxReplayDelay = time.Minute
	}
	if cfg.DefaultHorizon == 0 {
		cfg.DefaultHorizon = DefaultHorizon
	}
	if cfg.MaxStoreOutage == 0 {
		cfg.MaxStoreOutage = 2 * time.Minute
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 10 * time.Second
	}
	if cfg.Policy.Levels() == 0 {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.Reserve == nil {
		cfg.Reserve = DefaultReserve
	}
	cfg.Reserve = fitReserve(cfg.Reserve, cfg.Parallelism)
	if cfg.Buffer == 0 {
		cfg.Buffer = min(DefaultBuffer, max(16, cfg.Parallelism/2))
	}
}

// check returns what is wrong with a config whose defaults are set.
func (cfg *SchedulerConfig) check() error {
	if err := CheckRetry(*cfg.Retry); err != nil {
		return fmt.Errorf("delivery scheduler: Retry: %w", err)
	}
	if cfg.Steps != nil && len(cfg.NonIdempotent) > 0 {
		if err := CheckStaleAfter(cfg.StaleAfter, cfg.Retry); err != nil {
			return fmt.Errorf("delivery scheduler: %w", err)
		}
	}
	if cfg.MaxParkings < 0 || cfg.DefaultHorizon < 0 {
		return fmt.Errorf("delivery scheduler: MaxParkings %d and DefaultHorizon %v must not be negative", cfg.MaxParkings, cfg.DefaultHorizon)
	}
	if cfg.ParkTopic != "" && (cfg.Replay == nil || cfg.ReplayCommitter == nil) {
		return fmt.Errorf("delivery scheduler: ParkTopic %q needs Replay and ReplayCommitter, to read it back", cfg.ParkTopic)
	}
	switch {
	case cfg.Source != nil && cfg.Levels != nil:
		return fmt.Errorf("delivery scheduler: give Source or Levels, not both")
	case cfg.Levels != nil && len(cfg.Levels) != Levels:
		return fmt.Errorf("delivery scheduler: %d Levels, want %d (high, normal, low)", len(cfg.Levels), Levels)
	}
	return nil
}

// joinLevelCommitters sets Committer, if Levels are given without one, to
// the levels' sources' own, joined.
func (cfg *SchedulerConfig) joinLevelCommitters() error {
	if cfg.Levels == nil || cfg.Committer != nil {
		return nil
	}
	cs := make([]stream.Committer, len(cfg.Levels))
	for l, lv := range cfg.Levels {
		c, ok := lv.Source.(stream.Committer)
		if !ok {
			return fmt.Errorf("delivery scheduler: level %d's source is no stream.Committer: give Committer", l)
		}
		cs[l] = c
	}
	cfg.Committer = stream.Committers(cs...)
	return nil
}

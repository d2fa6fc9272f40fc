// Package demo runs the whole drone delivery system in one process on
// embedded defaults — an in-process Kafka-compatible broker (kfake),
// simulated backends, the load generator, the scheduler and the supervisor
// — with a live status line and a verification summary. It is what
// `sluice demo` (and `make run`) shows.
package demo

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// Config shapes a demo run.
type Config struct {
	// Rate of requests per second and how long to send them; bursts at
	// BurstRate for BurstFor every BurstEvery, the first BurstAt after the
	// start (Overload sets one long burst).
	Rate, BurstRate               float64
	Duration                      time.Duration
	BurstEvery, BurstFor, BurstAt time.Duration
	// Mix is the share of requests of each level of priority, highest
	// first (default loadgen.DefaultMix: 10% high, 30% normal, 60% low);
	// each level has a topic of its own. Policy is how the scheduler reads
	// them (default delivery.DefaultPolicy: weighted 6:3:1).
	Mix    []float64
	Policy backpressure.Priority
	// Parallelism caps each step's calls in flight (default
	// delivery.DefaultParallelism).
	Parallelism int
	// Sim shapes the simulated backends.
	Sim delivery.SimConfig
	// Partitions of the requests topic (default 16).
	Partitions int32
	// Drain is how long the drain after the load may go without a new
	// outcome before the run is verified as it stands (default 30s): the
	// demo waits for every request to be accounted for while the workers
	// make progress, however slowly (a machine short of CPU).
	Drain time.Duration
	// Every is the status line interval (default 1s; negative: none).
	Every time.Duration
	// Listen serves metrics and /status there, if set.
	Listen string
	// Restarts crashes the scheduler and the supervisor this many times
	// during the load (without draining; new ones take over), to prove that
	// nothing is lost or applied twice. Metrics are off when set.
	Restarts int
	// Transport is where the requests and every other topic travel:
	// TransportKafka (the default: Brokers, or an embedded broker) or
	// TransportRedis (the Redis streams of the same names, on the server
	// of Redis, read in consumer groups).
	Transport string
	// Brokers, if set, are a real cluster to run against instead of the
	// embedded one; the topics are created if missing.
	Brokers []string
	// Redis, if set, makes the drone service non-idempotent (every call
	// books a drone) and keeps durable step records in Redis so that
	// replayed requests do not book twice (mode b): host:port of a server,
	// or EmbeddedRedis for an in-process one (miniredis). With
	// TransportRedis the streams are there too (default EmbeddedRedis).
	Redis string
	// RedisOptions, if set, say how to reach the server of Redis (its
	// user, password, TLS and database; redis.ParseURL reads them from a
	// URL); Redis is then its address.
	RedisOptions *redis.Options
	// redisEmbedded says that Redis is the embedded server, started by
	// the run.
	redisEmbedded bool
	// HTTP puts the simulated services behind real HTTP servers on
	// loopback (JSON, PUT create-or-update) and calls them through a pooled
	// HTTP client, instead of calling them in-process.
	HTTP bool
	// LatencyTarget is the end-to-end p99 the verdict judges the run
	// against, MET or MISSED (default 2s: what the default load should
	// meet on an idle 2-core machine; negative: none). TargetHigh judges
	// the high level's p99 only (Overload sets it: the lower levels take
	// the lag on purpose).
	LatencyTarget time.Duration
	TargetHigh    bool
	Logger        *slog.Logger
	// TracerProvider, if set, traces each request from the load
	// generator's send (loadgen.Config.TracerProvider) through the
	// scheduler's pipeline (delivery.SchedulerConfig.TracerProvider) and,
	// compensated, the supervisor's (supervisor.Config.TracerProvider).
	// Default nil: off.
	TracerProvider trace.TracerProvider
}

// Defaults returns the demo's defaults for a run of d.
func Defaults(d time.Duration) Config {
	return Config{Rate: 10_000, BurstRate: 20_000, Duration: d, BurstEvery: 10 * time.Second, BurstFor: 3 * time.Second,
		Sim: delivery.SimConfig{MinLatency: 2 * time.Millisecond, MaxLatency: 10 * time.Millisecond,
			TransientRate: 0.01, ThrottleRate: 0.002, PayingPrefix: loadgen.PayingPrefix},
		Partitions: 16, Drain: 30 * time.Second, Every: time.Second}
}

// OverloadFor is how long the overload phase of Overload lasts, and
// OverloadAt when it starts.
const (
	OverloadFor = 10 * time.Second
	OverloadAt  = 5 * time.Second
)

// Overload returns cfg with one phase of OverloadFor at rate (twice what
// the machine holds, say), OverloadAt into the load, the rest of it at
// cfg.Rate: high-priority requests stay fast while the low ones take the
// lag. The load lasts at least until OverloadAt after the phase.
func Overload(cfg Config, rate float64) Config {
	cfg.BurstRate, cfg.BurstAt, cfg.BurstFor = rate, OverloadAt, OverloadFor
	cfg.Duration = max(cfg.Duration, 2*OverloadAt+OverloadFor)
	cfg.BurstEvery = cfg.Duration // one phase
	cfg.TargetHigh = true
	return cfg
}

// DefaultLatencyTarget is Config.LatencyTarget's default: the p99 end to
// end that the demo's default load (10,000 requests/s, bursts of
// 20,000/s) meets on an idle 2-core machine, its bursts' lag drained
// within it.
const DefaultLatencyTarget = 2 * time.Second

// EmbeddedRedis as Config.Redis runs an in-process Redis-compatible server
// for the step records.
const EmbeddedRedis = "embedded"

// Run runs the demo and returns its verification summary.
func Run(ctx context.Context, cfg Config, w io.Writer) (Summary, error) {
	w = &syncWriter{w: w}
	cfg = cfg.withDefaults()
	var cl cleanups
	defer cl.run()
	sp, ledger, err := startSystem(ctx, &cfg, w, &cl)
	if err != nil {
		return Summary{}, err
	}
	w8 := &workers{}
	first, err := sp.spawn(ctx, cfg.Restarts == 0)
	if err != nil {
		return Summary{}, err
	}
	w8.set(first)
	defer func() { w8.current().shutdown(false) }()
	if cfg.Listen != "" && cfg.Restarts == 0 {
		stop, err := serveMetrics(cfg.Listen, sp, first, tracing.Enabled(cfg.TracerProvider), w)
		if err != nil {
			return Summary{}, err
		}
		defer stop()
	}
	if cfg.Restarts > 0 {
		go sp.crashes(ctx, w8, w)
	}
	cpu := sampleCPU()
	sent, start, loadDone := startLoad(ctx, cfg, sp.tr.producer)
	st := &status{w: w8, ledger: ledger, notes: sp.notes, sent: sent, lat: sp.lat, levels: sp.levels, start: start}
	wt := watch{cfg: cfg, w: w, workers: w8, status: st, sent: sent, ledger: ledger, tr: sp.tr}
	if err := wt.run(ctx, loadDone, sp.errs); err != nil {
		return Summary{}, err
	}
	sum, err := Verify(sent, ledger, sp.tr.brokers, sp.tr.verify...)
	if err != nil {
		return sum, err
	}
	sum.Elapsed = time.Since(start)
	sp.measured(&sum, &wt, cfg, sampleCPU().since(cpu))
	return sum, wt.loadErr
}

// startSystem starts the transport (the broker, or Redis), the services
// and the producer the workers share, and returns the spawner of the
// workers and the services' ledger.
func startSystem(ctx context.Context, cfg *Config, w io.Writer, cl *cleanups) (*spawner, *delivery.Ledger, error) {
	tr, err := startTransport(ctx, cfg, w, cl)
	if err != nil {
		return nil, nil, err
	}
	ledger := delivery.NewLedger()
	backends, steps, err := startBackends(ctx, cfg, ledger, w, cl)
	if err != nil {
		return nil, nil, err
	}
	sp := &spawner{cfg: *cfg, tr: tr, backends: backends, steps: steps, reg: prometheus.NewRegistry(),
		notes: supervisor.NewNotifications(), lat: newLatencies(), levels: delivery.NewLevelStats(true), errs: make(chan error, 8)}
	// Restarts need abrupt drains and cannot re-register metrics: the
	// metrics are on when the run does not restart.
	if cfg.Restarts > 0 {
		sp.drain = time.Nanosecond
		return sp, ledger, nil
	}
	if sp.schedMetrics, err = observe.New(sp.reg, "delivery"); err != nil {
		return nil, nil, err
	}
	if sp.supMetrics, err = observe.New(sp.reg, "supervisor"); err != nil {
		return nil, nil, err
	}
	return sp, ledger, nil
}

// serveMetrics serves the metrics and the live view of the first
// workers on addr, until the returned stop is called; in OpenMetrics too
// (for the exemplars) if traced.
func serveMetrics(addr string, sp *spawner, first *incarnation, traced bool, w io.Writer) (stop func(), err error) {
	srvCtx, stopSrv := context.WithCancel(context.Background())
	at, served, err := observe.Serve(srvCtx, observe.ServerConfig{Addr: addr, Gatherer: sp.reg,
		Graphs: []*stream.Graph{first.sch.Graph, first.sup}, Metrics: []*observe.Metrics{sp.schedMetrics, sp.supMetrics}, Ready: first.ready,
		OpenMetrics: traced}) // for the exemplars
	if err != nil {
		stopSrv()
		return nil, fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	fmt.Fprintf(w, "live view: http://%s/status  metrics: http://%s/metrics\n", at, at)
	return func() { stopSrv(); <-served }, nil
}

// startLoad starts the load generator; loadDone gets its result.
func startLoad(ctx context.Context, cfg Config, producer kafkasink.Producer) (sent *loadgen.Sent, start time.Time, loadDone <-chan error) {
	sent = loadgen.NewSent()
	start = time.Now()
	lg := loadgen.Default("", cfg.Rate, cfg.Duration)
	lg.Topics, lg.Mix = topicLevels[:], cfg.Mix
	lg.BurstRate, lg.BurstEvery, lg.BurstFor, lg.BurstAt = cfg.BurstRate, cfg.BurstEvery, cfg.BurstFor, cfg.BurstAt
	lg.TracerProvider = cfg.TracerProvider
	done := make(chan error, 1)
	go func() { done <- loadgen.Run(ctx, producer, lg, sent) }()
	return sent, start, done
}

// measured adds to sum what the run measured besides the outcomes:
// latencies, lag, the drain, and how long the process waited for a CPU.
func (sp *spawner) measured(sum *Summary, wt *watch, cfg Config, cpu cpuTimes) {
	sum.MaxLag, sum.Drained, sum.DrainStalled, sum.DrainLimit = wt.maxLag, wt.drained, wt.stalled, cfg.Drain
	sum.HeldParked, sum.HeldInStages = wt.heldParked, wt.heldInStages
	qs := sp.lat.overall(0.5, 0.99)
	sum.P50, sum.P99 = qs[0], qs[1]
	done := sp.levels.Completed()
	for l := range sum.Levels {
		qs := sp.levels.Quantiles(l, 0.5, 0.99)
		sum.Levels[l] = LevelSummary{Completed: done[l], P50: qs[0], P99: qs[1], MaxLag: wt.maxLevelLag[l]}
	}
	sum.LatencyTarget, sum.TargetHigh = cfg.LatencyTarget, cfg.TargetHigh
	sum.CPURun, sum.CPUWait = cpu.run, cpu.wait
}

// withDefaults fills the fields left zero.
func (cfg Config) withDefaults() Config {
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	if cfg.Drain == 0 {
		cfg.Drain = 30 * time.Second
	}
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.LatencyTarget == 0 {
		cfg.LatencyTarget = DefaultLatencyTarget
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportKafka
	}
	if cfg.Transport == TransportRedis && cfg.Redis == "" {
		cfg.Redis = EmbeddedRedis
	}
	return cfg
}

// Package demo runs the whole drone delivery system in one process on
// embedded defaults — an in-process Kafka-compatible broker (kfake),
// simulated backends, the load generator, the scheduler and the supervisor
// — with a live status line and a verification summary. It is what
// `sluice demo` (and `make run`) shows.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// Config shapes a demo run.
type Config struct {
	// Rate of requests per second and how long to send them; bursts at
	// BurstRate for BurstFor every BurstEvery.
	Rate, BurstRate      float64
	Duration             time.Duration
	BurstEvery, BurstFor time.Duration
	// Sim shapes the simulated backends.
	Sim delivery.SimConfig
	// Partitions of the requests topic (default 16).
	Partitions int32
	// Drain is how long to wait, after the load ends, for every request to
	// be accounted for (default 30s).
	Drain time.Duration
	// Every is the status line interval (default 1s; negative: none).
	Every time.Duration
	// Listen serves metrics and /status there, if set.
	Listen string
	// Restarts crashes the scheduler and the supervisor this many times
	// during the load (without draining; new ones take over), to prove that
	// nothing is lost or applied twice. Metrics are off when set.
	Restarts int
	// Brokers, if set, are a real cluster to run against instead of the
	// embedded one; the topics are created if missing.
	Brokers []string
	// Redis, if set, makes the drone service non-idempotent (every call
	// books a drone) and keeps durable step records in Redis so that
	// replayed requests do not book twice (mode b): host:port of a server,
	// or EmbeddedRedis for an in-process one (miniredis).
	Redis string
	// HTTP puts the simulated services behind real HTTP servers on
	// loopback (JSON, PUT create-or-update) and calls them through a pooled
	// HTTP client, instead of calling them in-process.
	HTTP   bool
	Logger *slog.Logger
}

// Defaults returns the demo's defaults for a run of d.
func Defaults(d time.Duration) Config {
	return Config{Rate: 10_000, BurstRate: 20_000, Duration: d, BurstEvery: 10 * time.Second, BurstFor: 3 * time.Second,
		Sim: delivery.SimConfig{MinLatency: 2 * time.Millisecond, MaxLatency: 10 * time.Millisecond,
			TransientRate: 0.01, ThrottleRate: 0.002},
		Partitions: 16, Drain: 30 * time.Second, Every: time.Second}
}

// EmbeddedRedis as Config.Redis runs an in-process Redis-compatible server
// for the step records.
const EmbeddedRedis = "embedded"

// Run runs the demo and returns its verification summary.
func Run(ctx context.Context, cfg Config, w io.Writer) (Summary, error) {
	w = &syncWriter{w: w}
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	if cfg.Drain == 0 {
		cfg.Drain = 30 * time.Second
	}
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, topicRequests),
			kfake.SeedTopics(4, topicFailures), kfake.SeedTopics(1, topicDead), kfake.SeedTopics(4, topicParked),
			kfake.SeedTopics(4, topicRetry), kfake.SeedTopics(1, topicSupervisorDead))
		if err != nil {
			return Summary{}, fmt.Errorf("starting the embedded broker: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	} else if err := createTopics(ctx, brokers, map[string]int32{topicRequests: cfg.Partitions, topicFailures: 4, topicDead: 1,
		topicParked: 4, topicRetry: 4, topicSupervisorDead: 1}); err != nil {
		return Summary{}, err
	}

	ledger := delivery.NewLedger()
	backends := delivery.Simulated(cfg.Sim, ledger, loadgen.SuspendedOwner)
	var steps delivery.StepStore
	if cfg.Redis == EmbeddedRedis {
		mr, err := miniredis.Run()
		if err != nil {
			return Summary{}, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		defer mr.Close()
		cfg.Redis = mr.Addr()
		fmt.Fprintf(w, "step records: embedded Redis (miniredis) on %s\n", cfg.Redis)
	}
	if cfg.Redis != "" {
		rc := redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: 64})
		defer rc.Close()
		if err := delivery.CheckRedis(ctx, rc); err != nil {
			return Summary{}, fmt.Errorf("redis at %s: %w", cfg.Redis, err)
		}
		rs := delivery.NewRedisSteps(rc, time.Hour)
		defer rs.Close()
		steps = rs
		backends = delivery.SimulatedNonIdempotent(cfg.Sim, ledger, loadgen.SuspendedOwner)
		fmt.Fprintf(w, "mode b: drone scheduling is not idempotent; step records in Redis at %s\n", cfg.Redis)
	}
	if cfg.HTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Summary{}, err
		}
		srv := &http.Server{Handler: delivery.HTTPHandler(backends), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		// One client for every incarnation, two at once during a restart.
		calls := 2 * (delivery.MaxCalls(delivery.DefaultParallelism) + supervisor.MaxCalls)
		backends = delivery.HTTPBackends("http://"+ln.Addr().String(), delivery.NewHTTPClient(calls))
		fmt.Fprintf(w, "backends: HTTP services on %s\n", ln.Addr())
	}
	notes := supervisor.NewNotifications()
	reg := prometheus.NewRegistry()
	schedMetrics, err := observe.New(reg, "delivery")
	if err != nil {
		return Summary{}, err
	}
	supMetrics, err := observe.New(reg, "supervisor")
	if err != nil {
		return Summary{}, err
	}
	lat := newLatencies()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return Summary{}, err
	}
	defer producer.Close()

	errs := make(chan error, 8)
	w8 := &workers{}
	spawn := func(withMetrics bool, drain time.Duration) (*incarnation, error) {
		inc := &incarnation{done: make(chan struct{})}
		var err error
		inc.src, err = kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "scheduler",
			Topics: []string{topicRequests}, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		inc.supSrc, err = kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "supervisor",
			Topics: []string{topicFailures}, Logger: cfg.Logger})
		if err != nil {
			inc.src.Close(ctx)
			return nil, err
		}
		inc.replaySrc, err = kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "supervisor-replay",
			Topics: []string{topicRetry}, Logger: cfg.Logger})
		if err != nil {
			inc.src.Close(ctx)
			inc.supSrc.Close(ctx)
			return nil, err
		}
		inc.parkedSrc, err = kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "scheduler-replay",
			Topics: []string{topicParked}, Logger: cfg.Logger})
		if err != nil {
			inc.src.Close(ctx)
			inc.supSrc.Close(ctx)
			inc.replaySrc.Close(ctx)
			return nil, err
		}
		scfg := delivery.SchedulerConfig{Source: inc.src, Committer: inc.src, Backends: backends, Producer: producer,
			FailuresTopic: topicFailures, DeadLetterTopic: topicDead, Observer: lat, Logger: cfg.Logger, DrainTimeout: drain,
			Steps: steps, NonIdempotent: []delivery.Step{delivery.StepDrone},
			ParkTopic: topicParked, Replay: inc.parkedSrc, ReplayCommitter: inc.parkedSrc,
			ReplayAfter: replayAfter, MaxReplayDelay: maxReplayDelay, StaleAfter: staleAfter}
		pcfg := supervisor.Config{Source: inc.supSrc, Committer: inc.supSrc, Backends: backends, Notifier: notes,
			Logger: cfg.Logger, DrainTimeout: drain, Producer: producer, RetryTopic: topicRetry,
			DeadLetterTopic: topicSupervisorDead, Replay: inc.replaySrc, ReplayCommitter: inc.replaySrc,
			ReplayAfter: replayAfter, MaxReplayDelay: maxReplayDelay}
		if withMetrics {
			scfg.Metrics, pcfg.Metrics = schedMetrics, supMetrics
		}
		if inc.sch, err = delivery.NewScheduler(scfg); err != nil {
			return nil, err
		}
		if inc.sup, err = supervisor.New(pcfg); err != nil {
			return nil, err
		}
		runCtx, stop := context.WithCancel(context.Background())
		inc.stop = stop
		var wg sync.WaitGroup
		for _, g := range []*stream.Graph{inc.sch.Graph, inc.sup} {
			wg.Go(func() {
				if err := g.Run(runCtx); err != nil && !inc.crashed.Load() {
					errs <- err
				}
			})
		}
		go func() { wg.Wait(); close(inc.done) }()
		return inc, nil
	}
	// Restarts need abrupt drains and cannot re-register metrics: the
	// metrics are on when the run does not restart.
	drain := time.Duration(0)
	if cfg.Restarts > 0 {
		drain = time.Nanosecond
	}
	first, err := spawn(cfg.Restarts == 0, drain)
	if err != nil {
		return Summary{}, err
	}
	w8.set(first)
	defer func() { w8.current().shutdown(false) }()
	if cfg.Listen != "" && cfg.Restarts == 0 {
		srvCtx, stopSrv := context.WithCancel(context.Background())
		addr, served, err := observe.Serve(srvCtx, observe.ServerConfig{Addr: cfg.Listen, Gatherer: reg,
			Graphs: []*stream.Graph{first.sch.Graph, first.sup}, Ready: first.src.Ready})
		if err != nil {
			stopSrv()
			return Summary{}, fmt.Errorf("serving metrics on %s: %w", cfg.Listen, err)
		}
		fmt.Fprintf(w, "live view: http://%s/status  metrics: http://%s/metrics\n", addr, addr)
		defer func() { stopSrv(); <-served }()
	}
	if cfg.Restarts > 0 {
		// Crash the scheduler and the supervisor at even moments of the
		// load: stop them without draining (in-flight messages stay
		// unsettled and are redone) and start new ones in the same groups.
		go func() {
			every := cfg.Duration / time.Duration(cfg.Restarts+1)
			for range cfg.Restarts {
				select {
				case <-time.After(every):
				case <-ctx.Done():
					return
				}
				w8.current().shutdown(true)
				inc, err := spawn(false, drain)
				if err != nil {
					errs <- err
					return
				}
				w8.set(inc)
				fmt.Fprintln(w, "  -- scheduler and supervisor crashed and restarted --")
			}
		}()
	}

	sent := loadgen.NewSent()
	start := time.Now()
	lg := loadgen.Default(topicRequests, cfg.Rate, cfg.Duration)
	lg.BurstRate, lg.BurstEvery, lg.BurstFor = cfg.BurstRate, cfg.BurstEvery, cfg.BurstFor
	loadDone := make(chan error, 1)
	go func() { loadDone <- loadgen.Run(ctx, producer, lg, sent) }()

	st := &status{w: w8, ledger: ledger, notes: notes, sent: sent, lat: lat, start: start}
	var tick <-chan time.Time
	if cfg.Every > 0 {
		t := time.NewTicker(cfg.Every)
		defer t.Stop()
		tick = t.C
	}
	var loadErr error
	var drainBy time.Time
	var maxLag int64
	var drained time.Duration
	loading := true
wait:
	for {
		select {
		case err := <-errs:
			return Summary{}, err
		case loadErr = <-loadDone:
			loading = false
			drainBy = time.Now().Add(cfg.Drain)
			if loadErr != nil {
				break wait
			}
		case <-tick:
			fmt.Fprintln(w, st.line())
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			break wait
		}
		var lag int64
		for _, p := range w8.current().src.Stats().Partitions {
			lag += p.Lag
		}
		maxLag = max(maxLag, lag)
		if !loading && (Accounted(sent, ledger, w8.deadLettered(), brokers) || time.Now().After(drainBy)) {
			drained = time.Since(drainBy.Add(-cfg.Drain))
			break
		}
	}
	sum, verr := Verify(sent, ledger, brokers)
	if verr != nil {
		return sum, verr
	}
	sum.Elapsed = time.Since(start)
	sum.MaxLag, sum.Drained = maxLag, drained
	qs := lat.overall(0.5, 0.99)
	sum.P50, sum.P99 = qs[0], qs[1]
	if loadErr != nil {
		return sum, loadErr
	}
	return sum, nil
}

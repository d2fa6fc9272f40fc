package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// connFlags are the flags every command that talks to Kafka takes; each
// has an environment variable that sets its default.
type connFlags struct {
	brokers, saslMech, saslUser, saslPass string
	tls                                   bool
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "Kafka brokers, comma separated")
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS")
	fs.StringVar(&c.saslMech, "sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	fs.StringVar(&c.saslUser, "sasl-user", "", "SASL user")
	fs.StringVar(&c.saslPass, "sasl-password", "", "SASL password (prefer the variable to the flag: a command line is visible to every user of the machine)")
}

func (c *connFlags) conn() kafka.Conn {
	cn := kafka.Conn{Brokers: splitComma(c.brokers), ClientID: "sluice"}
	if c.tls {
		cn.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.saslMech != "" {
		cn.SASL = &kafka.SASL{Mechanism: c.saslMech, User: c.saslUser, Password: c.saslPass}
	}
	return cn
}

// onListen, if set (by tests), is told where a worker serves its
// endpoints.
var onListen func(which, addr string)

// runWorker runs `sluice run delivery|supervisor` against a real cluster
// (or, with -transport redis, a Redis server's streams) until
// SIGINT/SIGTERM, then drains and commits.
//
// Everything the worker needs is checked before it joins its consumer
// groups — the topics it reads and writes, Redis, its listen address — so
// that a misconfigured worker, restarted again and again, never holds
// partitions (or entries) away from the healthy ones.
func runWorker(ctx context.Context, args []string) error {
	// The command table (help.go) calls it with the pipeline first.
	if len(args) == 0 || (args[0] != "delivery" && args[0] != "supervisor") {
		return errors.New("runWorker: the first argument must name the pipeline")
	}
	wf, err := parseWorkerFlags(args[0], args[1:])
	if err != nil {
		return err
	}
	w := &worker{f: wf}
	defer w.close()
	if err := w.prepare(ctx); err != nil {
		return err
	}
	if err := w.join(ctx); err != nil {
		return err
	}
	if err := w.build(); err != nil {
		return err
	}
	return w.run(ctx)
}

// input is a source the worker reads in a consumer group: a Kafka topic's
// (*kafka.Source) or a Redis stream's (*redisstream.Source). It commits
// what is settled, and says on /readyz whether it can work.
type input interface {
	stream.Source[[]byte]
	stream.Committer
	Ready(ctx context.Context) error
}

// worker is a delivery or supervisor worker being started: what each step
// of runWorker made, and what it closes when it ends.
type worker struct {
	f        *workerFlags
	backends delivery.Backends
	producer kafkasink.Producer // the records the pipeline writes: failures, dead letters, parkings
	rc       *redis.Client      // the drone step's records (delivery, with -redis)
	streams  *redis.Client      // with -transport redis: the streams' server
	ln       net.Listener
	srcs     []input // the input: one source, or one per level of priority
	replay   input   // the replays of what was parked
	// leave ends the sources' membership after the pipeline's run (failed:
	// it ended with an error), once: a Kafka source's last commit and
	// leaving its group. Nil: nothing to do.
	leave   func(failed bool) error
	traces  tracing // off: a zero tracing
	reg     *prometheus.Registry
	m       *observe.Metrics
	g       *stream.Graph
	closers []func()
}

// close closes what the steps opened, last first.
func (w *worker) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// prepare checks, before the worker joins its groups, the transport —
// the Kafka cluster and every topic, or the Redis server of the streams —,
// Redis for the step records and the listen address.
func (w *worker) prepare(ctx context.Context) error {
	f := w.f
	w.backends = f.backends()
	var err error
	if f.redisTransport() {
		err = w.prepareStreams(ctx)
	} else {
		err = w.prepareKafka(ctx)
	}
	if err != nil {
		return err
	}
	if f.ropts != nil && f.which == "delivery" {
		w.rc = redis.NewClient(f.ropts)
		w.closers = append(w.closers, func() { w.rc.Close() })
		if err := checkRedis(ctx, w.rc, f.ropts); err != nil {
			return err
		}
	}
	if w.ln, err = net.Listen("tcp", f.listen); err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	w.closers = append(w.closers, func() { w.ln.Close() })
	return nil
}

// join joins the consumer groups: the input's, one per level of priority
// with -level-topics, and the replays'.
func (w *worker) join(ctx context.Context) error {
	if w.f.redisTransport() {
		return w.joinStreams(ctx)
	}
	return w.joinKafka(ctx)
}

// replayGroup is the consumer group of the replays.
func (f *workerFlags) replayGroup() string {
	if f.rf.replayGroup != "" {
		return f.rf.replayGroup
	}
	return f.group + "-replay"
}

// levelGroup is the consumer group of the input l of n: -group, and the
// level's name with -level-topics; and the suffix it adds.
func (f *workerFlags) levelGroup(l, n int) (group, suffix string) {
	if n > 1 {
		suffix = "-" + delivery.LevelNames[l]
	}
	return f.group + suffix, suffix
}

// build builds the pipeline, the scheduler's or the supervisor's, and its
// metrics.
func (w *worker) build() error {
	f := w.f
	w.reg = prometheus.NewRegistry()
	m, err := observe.New(w.reg, f.which)
	if err != nil {
		return err
	}
	w.m = m
	instance := f.instance
	if instance == "" {
		instance = f.consumer // -transport redis: the worker's name in its groups
	}
	w.traces = f.tf.start(f.logger, instance)
	w.closers = append(w.closers, func() { w.traces.Shutdown(f.logger) })
	if f.which == "supervisor" {
		w.g, err = supervisor.New(supervisor.Config{Source: w.srcs[0], Committer: w.srcs[0], Backends: w.backends,
			Notifier: supervisor.NewNotifications(), Retry: f.retry, Metrics: m, Logger: f.logger,
			Producer: w.producer, RetryTopic: f.rf.retryTopic, DeadLetterTopic: f.rf.deadLetterTopic,
			Replay: w.replay, ReplayCommitter: w.replay, ReplayAfter: f.rf.replayAfter, MaxReplayDelay: f.rf.maxReplayDelay,
			MaxParkings: f.rf.maxParkings, TracerProvider: w.traces.Provider()})
		return err
	}
	cfg := delivery.SchedulerConfig{Backends: w.backends, Producer: w.producer,
		FailuresTopic: f.failures, DeadLetterTopic: f.dead, Parallelism: f.parallelism, Retry: f.retry, Metrics: m, Logger: f.logger,
		ParkTopic: f.rf.retryTopic, Replay: w.replay, ReplayCommitter: w.replay, ReplayAfter: f.rf.replayAfter,
		MaxReplayDelay: f.rf.maxReplayDelay, MaxParkings: f.rf.maxParkings, StaleAfter: f.staleAfter, DefaultHorizon: f.horizon,
		LatencyTarget: f.latencyTarget, TracerProvider: w.traces.Provider()}
	if len(w.srcs) == 1 {
		cfg.Source, cfg.Committer = w.srcs[0], w.srcs[0]
	} else {
		for l, s := range w.srcs {
			cfg.Levels = append(cfg.Levels, source.Level[[]byte]{Name: "requests-" + delivery.LevelNames[l], Source: s})
		}
	}
	if w.rc != nil {
		steps := delivery.NewRedisSteps(w.rc, 24*time.Hour)
		w.closers = append(w.closers, func() { steps.Close() })
		cfg.Steps, cfg.NonIdempotent = steps, []delivery.Step{delivery.StepDrone}
	}
	sch, err := delivery.NewScheduler(cfg)
	if err != nil {
		return err
	}
	w.g = sch.Graph
	return nil
}

// ready reports whether every source can work and Redis answers.
func (w *worker) ready(ctx context.Context) error {
	for _, s := range w.srcs {
		if err := s.Ready(ctx); err != nil {
			return err
		}
	}
	if err := w.replay.Ready(ctx); err != nil {
		return fmt.Errorf("replays: %w", err)
	}
	if w.rc != nil {
		if err := w.rc.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", describeRedis(w.f.ropts), err)
		}
	}
	return nil
}

// run serves the endpoints, logs the summaries and runs the pipeline
// until ctx ends; a worker that fails hands its partitions over at once.
func (w *worker) run(ctx context.Context) error {
	f := w.f
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	addr, served := serveWorker(srvCtx, w.ln, observe.ServerConfig{Gatherer: w.reg, Graphs: []*stream.Graph{w.g},
		Metrics: []*observe.Metrics{w.m}, Ready: w.ready, Pprof: f.pprof,
		// Traced, /metrics offers OpenMetrics for the exemplars.
		OpenMetrics: w.traces.Provider() != nil}, f.tf.url, w.traces.Provider() != nil)
	attrs := append(f.transportAttrs(), "pipeline", f.which, "topic", f.input, "group", f.group,
		"retry_topic", f.rf.retryTopic, "metrics", "http://"+addr+"/metrics")
	if w.traces.Provider() != nil {
		attrs = append(attrs, "slowest_traces", "http://"+addr+"/status/traces")
	}
	f.logger.Info("worker running", attrs...)
	if onListen != nil {
		onListen(f.which, addr)
	}
	sumCtx, stopSummaries := context.WithCancel(ctx)
	summarized := make(chan struct{})
	go func() {
		defer close(summarized)
		logSummaries(sumCtx, w.reg, f.logger, f.summaryEvery, f.fold)
	}()
	runErr := w.g.Run(ctx)
	stopSummaries()
	<-summarized
	var closeErr error
	if w.leave != nil {
		closeErr = w.leave(runErr != nil) // a worker that fails hands its partitions over at once, static member or not
	}
	stopSrv()
	<-served
	return errors.Join(runErr, closeErr)
}

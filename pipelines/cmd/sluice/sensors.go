package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// The sensors workload's commands: `sluice run sensors` (one instance
// against a real cluster), `sluice loadgen sensors` (its load) and
// `sluice demo sensors` (everything in one process on embedded defaults).

// onSensorsListen, if set (by tests), is told where `run sensors` serves.
var onSensorsListen func(addr string)

// runSensorsWorker runs one instance of the sensors pipeline until
// SIGINT/SIGTERM, then writes its final checkpoints and lets its
// partitions go. Everything it needs — the topics, Redis, its listen
// address — is checked before it claims any partition.
func runSensorsWorker(ctx context.Context, args []string) error {
	f, err := parseSensorsFlags(args)
	if err != nil {
		return err
	}
	ropts, err := redisOptions(f.redisURL, f.redisCA)
	if err != nil {
		return err
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	if _, err := sensors.NewStore(rc, f.namespace, f.retention); err != nil {
		return fmt.Errorf("-namespace: %w", err)
	}
	// Before claiming: the cluster and both topics, Redis, the address.
	partitions, err := f.checkTopics(ctx)
	if err != nil {
		return err
	}
	if err := pingRedis(ctx, rc, ropts); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	defer ln.Close()
	// /metrics: the worker's own numbers, and its pipeline's (stages,
	// ownership, Kafka source) that the dashboard and the alerts read.
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "sensors")
	if err != nil {
		return err
	}
	w, err := sensors.New(ctx, sensors.Config{Conn: f.cf.conn(), Topic: f.topic, DeadLetterTopic: f.dead, Redis: rc,
		Namespace: f.namespace, Group: f.group, InstanceID: f.instance, Interval: f.interval, Expiration: f.expiration,
		Lateness: f.lateness, IdleClose: f.idleClose, Writers: f.writers, MaxUnsettledPerPartition: f.maxUnsettled,
		Retention: f.retention, Logger: f.logger, Metrics: m})
	if err != nil {
		return err
	}
	if err := reg.Register(sensorsCollector{w}); err != nil {
		return err
	}
	hctx, stopHistory := context.WithCancel(ctx) // /status samples its history until the worker returns
	defer stopHistory()
	srv, served := serveSensors(hctx, ln, w, m, reg, rc, ropts, partitions)
	addr := ln.Addr().String()
	f.logger.Info("sensors worker running", "topic", f.topic, "partitions", len(partitions), "namespace", f.namespace, "group", f.group,
		"instance_id", f.instance, "redis", describeRedis(ropts), "page", "http://"+addr+"/homes", "metrics", "http://"+addr+"/metrics")
	if onSensorsListen != nil {
		onSensorsListen(addr)
	}
	runErr := f.runLogging(ctx, w, reg)
	st := w.Stats()
	f.logger.Info("sensors worker stopped", "readings", st.Parsed, "windows", st.Windows, "dead_letters_written", st.Malformed+st.Late, "err", runErr)
	sdctx, cancelSd := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelSd()
	_ = srv.Shutdown(sdctx)
	return errors.Join(runErr, <-served)
}

// sensorsFlags are the flags of `sluice run sensors`, checked, and the
// logger they make.
type sensorsFlags struct {
	cf                                                          connFlags
	lf                                                          logFlags
	redisURL, redisCA, namespace, group, instance, topic, dead  string
	listen                                                      string
	interval, expiration, lateness, idleClose, retention, every time.Duration
	summaryEvery                                                time.Duration
	writers, maxUnsettled                                       int
	logger                                                      *slog.Logger
	fold                                                        *retryFold
}

// parseSensorsFlags parses and checks the flags of `sluice run sensors`.
func parseSensorsFlags(args []string) (*sensorsFlags, error) {
	f := &sensorsFlags{}
	fs := flag.NewFlagSet("run sensors", flag.ContinueOnError)
	f.cf.register(fs)
	host, _ := os.Hostname()
	fs.StringVar(&f.redisURL, "redis", "127.0.0.1:6379", "Redis of the ownership records, checkpoints and aggregates: "+
		"redis://[user:password@]host:port[/db], rediss:// for TLS, or host:port; the password may come from $SLUICE_REDIS_PASSWORD instead")
	fs.StringVar(&f.redisCA, "redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
	fs.StringVar(&f.namespace, "namespace", sensors.DefaultNamespace, "names the aggregates and the ownership records in Redis")
	fs.StringVar(&f.group, "group", sensors.DefaultGroup, "the group of instances sharing the topic's partitions (their ownership records and checkpoints)")
	fs.StringVar(&f.instance, "instance-id", fmt.Sprintf("%s:%d", host, os.Getpid()), "this instance's name in the group: unique (a pod name, host:pid)")
	fs.StringVar(&f.topic, "topic", sensors.DefaultTopic, "topic of the readings")
	fs.StringVar(&f.dead, "dead-letter-topic", sensors.DefaultDeadLetterTopic, "topic of the malformed and late readings, with their reason")
	fs.DurationVar(&f.interval, "interval", 10*time.Second, "ownership renewal interval: leases are renewed, and one partition a round claimed or let go, this often")
	fs.DurationVar(&f.expiration, "expiration", 0, "lease: a partition whose owner has not renewed it for this long is claimed by another (0: 6 x -interval)")
	fs.DurationVar(&f.lateness, "lateness", sensors.DefaultLateness, "how long after its event time a reading may reach the topic; later ones are dead letters")
	fs.DurationVar(&f.idleClose, "idle-close", 0, "a partition that received nothing for this long has its open minutes written (0: a minute plus -lateness)")
	fs.IntVar(&f.writers, "writers", sensors.DefaultWriters, "minutes written to Redis at once")
	fs.IntVar(&f.maxUnsettled, "max-unsettled", sensors.DefaultMaxUnsettled, "readings of a partition held unsettled (in open minutes or waiting for Redis) "+
		"before its reading pauses; it resumes at half, so this must exceed twice a minute and its -lateness of a partition's readings")
	fs.DurationVar(&f.retention, "retention", sensors.DefaultRetention, "how long a home's minutes are kept in Redis")
	fs.StringVar(&f.listen, "listen", defaultListen["run sensors"], "address of /metrics, /healthz, /readyz, the live page /status and the residents' page /homes")
	fs.DurationVar(&f.every, "status-every", 5*time.Second, "how often a status line is logged: partitions held, rates, lag, write p99 (0: never)")
	fs.DurationVar(&f.summaryEvery, "summary-every", 10*time.Second,
		"log summary lines this often, read from the metrics: rates in and out, lag, in flight, outcomes and write retries since the last ones (0: none)")
	f.lf.register(fs)
	if err := parseFlags("run", fs, args); err != nil {
		return nil, err
	}
	var err error
	if f.logger, f.fold, err = f.lf.workerLogger(logOutput, f.summaryEvery); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("run sensors: unexpected argument %q", fs.Arg(0))
	}
	return f, f.check()
}

// check checks the flags' values.
func (f *sensorsFlags) check() error {
	switch {
	case f.instance == "":
		return errors.New("-instance-id: must not be empty")
	case f.interval <= 0:
		return fmt.Errorf("-interval %v: must be more than 0", f.interval)
	case f.expiration != 0 && f.expiration <= f.interval:
		return fmt.Errorf("-expiration %v: must be more than -interval %v (a lease lapses between two renewals otherwise)", f.expiration, f.interval)
	case f.expiration < 0:
		return fmt.Errorf("-expiration %v: must not be negative", f.expiration)
	case f.lateness <= 0:
		return fmt.Errorf("-lateness %v: must be more than 0 (1ms for almost none)", f.lateness)
	case f.maxUnsettled < 1:
		return fmt.Errorf("-max-unsettled %d: must be at least 1", f.maxUnsettled)
	case f.idleClose < 0:
		return fmt.Errorf("-idle-close %v: must not be negative", f.idleClose)
	case f.writers < 1:
		return fmt.Errorf("-writers %d: must be at least 1", f.writers)
	case f.retention < time.Minute:
		return fmt.Errorf("-retention %v: must be a minute at least", f.retention)
	case f.every < 0:
		return fmt.Errorf("-status-every %v: must not be negative", f.every)
	case f.summaryEvery < 0:
		return fmt.Errorf("-summary-every %v: must not be negative (0: no summaries)", f.summaryEvery)
	case f.topic == "" || f.dead == "" || f.topic == f.dead:
		return fmt.Errorf("-topic %q, -dead-letter-topic %q: both required, and different", f.topic, f.dead)
	}
	return nil
}

// checkTopics checks that the cluster answers and holds both topics, and
// returns the readings topic's partitions.
func (f *sensorsFlags) checkTopics(ctx context.Context) ([]int32, error) {
	cl, err := kgo.NewClient(append(f.cf.conn().ClientOpts(), kgo.WithLogger(kafka.NewLogger(f.logger)))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = kafka.CheckTopics(cctx, cl, f.topic, f.dead)
	var partitions []int32
	if err == nil {
		partitions, err = topicPartitions(cctx, cl, f.topic)
	}
	if err != nil {
		return nil, fmt.Errorf("the sensors worker's topics: %w", err)
	}
	return partitions, nil
}

// serveSensors serves the residents' page, the metrics and the health
// endpoints on ln, and /status with the history it samples until hctx
// ends; served gets the server's end.
func serveSensors(hctx context.Context, ln net.Listener, w *sensors.Worker, m *observe.Metrics, reg *prometheus.Registry, rc *redis.Client, ropts *redis.Options,
	partitions []int32) (*http.Server, <-chan error) {
	ready := func(ctx context.Context) error {
		if err := rc.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", describeRedis(ropts), err)
		}
		if w.Stats().StoreDown {
			return errors.New("window writes to Redis fail")
		}
		return nil
	}
	mux := sensors.PageMux(w.Store(), w.Owners(), partitions)
	mux.Handle("/", observe.Handler(observe.ServerConfig{Gatherer: reg, Ready: ready,
		Graphs: []*stream.Graph{w.Graph()}, Metrics: []*observe.Metrics{m}, Context: hctx}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	return srv, served
}

// runLogging runs the worker until ctx ends, logging its status and
// summary lines meanwhile.
func (f *sensorsFlags) runLogging(ctx context.Context, w *sensors.Worker, reg prometheus.Gatherer) error {
	lctx, stop := context.WithCancel(ctx)
	var logging sync.WaitGroup
	logging.Go(func() { logSensorsStatus(lctx, w, f.logger, f.every) })
	logging.Go(func() { logSummaries(lctx, reg, f.logger, f.summaryEvery, f.fold) })
	err := w.Run(ctx)
	stop()
	logging.Wait()
	return err
}

// topicPartitions lists a topic's partitions, from the cluster.
func topicPartitions(ctx context.Context, cl *kgo.Client, topic string) ([]int32, error) {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := tds[topic]
	if !ok {
		return nil, fmt.Errorf("%w: %s", kafka.ErrUnknownTopic, topic)
	}
	if td.Err != nil {
		return nil, fmt.Errorf("%s: %w", topic, td.Err)
	}
	return td.Partitions.Numbers(), nil
}

// pingRedis checks that Redis answers (the sensors worker needs no step
// records, only Lua and hashes), naming a failed authentication as such.
func pingRedis(ctx context.Context, rc *redis.Client, opts *redis.Options) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		return explainRedis(fmt.Errorf("does not answer: %w", err), opts)
	}
	return nil
}

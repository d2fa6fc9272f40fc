package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
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
	fs := flag.NewFlagSet("run sensors", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	host, _ := os.Hostname()
	redisURL := fs.String("redis", "127.0.0.1:6379", "Redis of the ownership records, checkpoints and aggregates: "+
		"redis://[user:password@]host:port[/db], rediss:// for TLS, or host:port; the password may come from $SLUICE_REDIS_PASSWORD instead")
	redisCA := fs.String("redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
	namespace := fs.String("namespace", sensors.DefaultNamespace, "names the aggregates and the ownership records in Redis")
	group := fs.String("group", sensors.DefaultGroup, "the group of instances sharing the topic's partitions (their ownership records and checkpoints)")
	instance := fs.String("instance-id", fmt.Sprintf("%s:%d", host, os.Getpid()), "this instance's name in the group: unique (a pod name, host:pid)")
	topic := fs.String("topic", sensors.DefaultTopic, "topic of the readings")
	dead := fs.String("dead-letter-topic", sensors.DefaultDeadLetterTopic, "topic of the malformed and late readings, with their reason")
	interval := fs.Duration("interval", 10*time.Second, "ownership renewal interval: leases are renewed, and one partition a round claimed or let go, this often")
	expiration := fs.Duration("expiration", 0, "lease: a partition whose owner has not renewed it for this long is claimed by another (0: 6 x -interval)")
	lateness := fs.Duration("lateness", sensors.DefaultLateness, "how long after its event time a reading may reach the topic; later ones are dead letters")
	idleClose := fs.Duration("idle-close", 0, "a partition that received nothing for this long has its open minutes written (0: a minute plus -lateness)")
	writers := fs.Int("writers", sensors.DefaultWriters, "minutes written to Redis at once")
	maxUnsettled := fs.Int("max-unsettled", sensors.DefaultMaxUnsettled, "readings of a partition held unsettled (in open minutes or waiting for Redis) "+
		"before its reading pauses; it resumes at half, so this must exceed twice a minute and its -lateness of a partition's readings")
	retention := fs.Duration("retention", sensors.DefaultRetention, "how long a home's minutes are kept in Redis")
	listen := fs.String("listen", defaultListen["run sensors"], "address of /metrics, /healthz, /readyz and the residents' page /homes")
	every := fs.Duration("status-every", 5*time.Second, "how often a status line is logged (0: never)")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags("run", fs, args); err != nil {
		return err
	}
	logger, err := lf.logger(logOutput)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run sensors: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *instance == "":
		return errors.New("-instance-id: must not be empty")
	case *interval <= 0:
		return fmt.Errorf("-interval %v: must be more than 0", *interval)
	case *expiration != 0 && *expiration <= *interval:
		return fmt.Errorf("-expiration %v: must be more than -interval %v (a lease lapses between two renewals otherwise)", *expiration, *interval)
	case *expiration < 0:
		return fmt.Errorf("-expiration %v: must not be negative", *expiration)
	case *lateness <= 0:
		return fmt.Errorf("-lateness %v: must be more than 0 (1ms for almost none)", *lateness)
	case *maxUnsettled < 1:
		return fmt.Errorf("-max-unsettled %d: must be at least 1", *maxUnsettled)
	case *idleClose < 0:
		return fmt.Errorf("-idle-close %v: must not be negative", *idleClose)
	case *writers < 1:
		return fmt.Errorf("-writers %d: must be at least 1", *writers)
	case *retention < time.Minute:
		return fmt.Errorf("-retention %v: must be a minute at least", *retention)
	case *every < 0:
		return fmt.Errorf("-status-every %v: must not be negative", *every)
	case *topic == "" || *dead == "" || *topic == *dead:
		return fmt.Errorf("-topic %q, -dead-letter-topic %q: both required, and different", *topic, *dead)
	}
	ropts, err := redisOptions(*redisURL, *redisCA)
	if err != nil {
		return err
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	if _, err := sensors.NewStore(rc, *namespace, *retention); err != nil {
		return fmt.Errorf("-namespace: %w", err)
	}

	// Before claiming: the cluster and both topics, Redis, the address.
	cl, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.WithLogger(kafka.NewLogger(logger)))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, cl, *topic, *dead)
	var partitions []int32
	if err == nil {
		partitions, err = topicPartitions(cctx, cl, *topic)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("the sensors worker's topics: %w", err)
	}
	if err := pingRedis(ctx, rc, ropts); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	defer ln.Close()

	w, err := sensors.New(ctx, sensors.Config{Conn: cf.conn(), Topic: *topic, DeadLetterTopic: *dead, Redis: rc,
		Namespace: *namespace, Group: *group, InstanceID: *instance, Interval: *interval, Expiration: *expiration,
		Lateness: *lateness, IdleClose: *idleClose, Writers: *writers, MaxUnsettledPerPartition: *maxUnsettled,
		Retention: *retention, Logger: logger})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(sensorsCollector{w}); err != nil {
		return err
	}
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
	hctx, stopHistory := context.WithCancel(ctx) // /status samples its history until the worker returns
	defer stopHistory()
	mux.Handle("/", observe.Handler(observe.ServerConfig{Gatherer: reg, Ready: ready, Graphs: []*stream.Graph{w.Graph()}, Context: hctx}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	addr := ln.Addr().String()
	logger.Info("sensors worker running", "topic", *topic, "partitions", len(partitions), "namespace", *namespace, "group", *group,
		"instance_id", *instance, "redis", describeRedis(ropts), "page", "http://"+addr+"/homes", "metrics", "http://"+addr+"/metrics")
	if onSensorsListen != nil {
		onSensorsListen(addr)
	}
	statusDone := make(chan struct{})
	sctx, stopStatus := context.WithCancel(ctx)
	go func() {
		defer close(statusDone)
		logSensorsStatus(sctx, w, logger, *every)
	}()
	runErr := w.Run(ctx)
	stopStatus()
	<-statusDone
	st := w.Stats()
	logger.Info("sensors worker stopped", "readings", st.Parsed, "windows", st.Windows, "dead_letters_written", st.Malformed+st.Late, "err", runErr)
	sdctx, cancelSd := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelSd()
	_ = srv.Shutdown(sdctx)
	return errors.Join(runErr, <-served)
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

// logSensorsStatus logs the worker's status every so often until ctx
// ends: partitions held, readings per second, lag, window write p99 and
// the dead letters this worker wrote (a record replayed after its
// partition moved is dead-lettered again by its new owner: the dead
// letters of several workers add up to more than the bad readings).
func logSensorsStatus(ctx context.Context, w *sensors.Worker, logger *slog.Logger, every time.Duration) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := w.Stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := w.Stats()
			lctx, cancel := context.WithTimeout(ctx, lagWait)
			lag := w.Lag(lctx)
			cancel()
			dt := now.Sub(lastAt).Seconds()
			logger.Info("sensors status", "partitions", fmt.Sprint(st.Partitions), "held", len(st.Partitions),
				"readings_per_s", math.Round(float64(st.Parsed-last.Parsed)/dt), "windows_per_s", math.Round(float64(st.Windows-last.Windows)/dt),
				"lag", lag.String(), "window_write_p99", st.WriteP99.Round(time.Millisecond), "dead_letters_written", st.Malformed+st.Late,
				"write_retries", st.Retries, "store_down", st.StoreDown)
			last, lastAt = st, now
		}
	}
}

// lagWait bounds the broker's answer for a worker's lag (status line,
// /metrics): a broker slow to answer leaves the lag unknown rather than
// holding them up.
const lagWait = 2 * time.Second

// sensorsCollector exposes a worker's counters on /metrics.
type sensorsCollector struct{ w *sensors.Worker }

var sensorsDescs = struct {
	readings, windows, aggregates, commands, retries, readingsWritten, p99, partitions, lag, lagUnknown, storeDown *prometheus.Desc
}{
	readings:        prometheus.NewDesc("sluice_sensors_readings_total", "Readings by outcome: parsed, malformed (dead letter), heartbeat and out_of_range (filtered), late (dead letter).", []string{"outcome"}, nil),
	windows:         prometheus.NewDesc("sluice_sensors_windows_written_total", "Windows written to Redis: a partition's minute each.", nil, nil),
	aggregates:      prometheus.NewDesc("sluice_sensors_aggregates_total", "Home aggregates by what the conditional write did: written, or kept (the stored one covered more).", []string{"result"}, nil),
	commands:        prometheus.NewDesc("sluice_sensors_redis_calls_total", "Redis script calls sent by the window writes (one per sensors.HomesPerCall homes of a partition's minute, one for its totals).", nil, nil),
	retries:         prometheus.NewDesc("sluice_sensors_write_retries_total", "Window writes retried after a Redis error.", nil, nil),
	readingsWritten: prometheus.NewDesc("sluice_sensors_readings_written_total", "Readings in the windows written.", nil, nil),
	p99:             prometheus.NewDesc("sluice_sensors_window_write_p99_seconds", "99th percentile of the time from a window's close to its write, over the latest 4,096 windows.", nil, nil),
	partitions:      prometheus.NewDesc("sluice_sensors_partitions_held", "Partitions this instance holds.", nil, nil),
	lag:             prometheus.NewDesc("sluice_sensors_lag", "Records not yet read from the partitions held; absent while the lag of one of them is unknown.", nil, nil),
	lagUnknown:      prometheus.NewDesc("sluice_sensors_lag_unknown_partitions", "Partitions held whose lag is unknown: not started yet, or the broker did not say where their log ends.", nil, nil),
	storeDown:       prometheus.NewDesc("sluice_sensors_store_down", "1 while window writes to Redis fail past a second of backoff.", nil, nil),
}

func (sensorsCollector) Describe(ch chan<- *prometheus.Desc) {
	d := sensorsDescs
	for _, x := range []*prometheus.Desc{d.readings, d.windows, d.aggregates, d.commands, d.retries, d.readingsWritten, d.p99, d.partitions, d.lag, d.lagUnknown, d.storeDown} {
		ch <- x
	}
}

func (c sensorsCollector) Collect(ch chan<- prometheus.Metric) {
	st, d := c.w.Stats(), sensorsDescs
	counter := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter(d.readings, st.Parsed, "parsed")
	counter(d.readings, st.Malformed, "malformed")
	counter(d.readings, st.Heartbeats, "heartbeat")
	counter(d.readings, st.OutOfRange, "out_of_range")
	counter(d.readings, st.Late, "late")
	counter(d.windows, st.Windows)
	counter(d.aggregates, st.Written, "written")
	counter(d.aggregates, st.Kept, "kept")
	counter(d.commands, st.Commands)
	counter(d.retries, st.Retries)
	counter(d.readingsWritten, st.Readings)
	gauge(d.p99, st.WriteP99.Seconds())
	gauge(d.partitions, float64(len(st.Partitions)))
	ctx, cancel := context.WithTimeout(context.Background(), lagWait)
	lag := c.w.Lag(ctx)
	cancel()
	if len(lag.Unknown) == 0 {
		gauge(d.lag, float64(lag.Total()))
	}
	gauge(d.lagUnknown, float64(len(lag.Unknown)))
	down := 0.0
	if st.StoreDown {
		down = 1
	}
	gauge(d.storeDown, down)
}

// runSensorsLoadgen produces the sensors workload to a real cluster and
// prints the rate it achieved.
func runSensorsLoadgen(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("loadgen sensors", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	topic := fs.String("topic", sensors.DefaultTopic, "topic to produce the readings to")
	homes := fs.Int("homes", 100_000, "homes, each with one sensor of each kind sending a reading per simulated minute")
	kinds := fs.Int("kinds", 3, fmt.Sprintf("kinds of sensor at the start (1 to %d: motion, door, glass, co)", sensors.NumKinds))
	addKindAfter := fs.Duration("add-kind-after", 0, "add the next kind to every home after this long: the rate rises by a kind's share (0: never)")
	compression := fs.Float64("compression", 60, "simulated time per real time (60: a simulated minute per second)")
	minutes := fs.Int("minutes", 0, "stop after this many simulated minutes (0: see -duration)")
	dur := fs.Duration("duration", 0, "stop after this long (0 and -minutes 0: until interrupted). With either, the simulated time starts "+
		"as far back as the run lasts, and ends at the clock; until interrupted, it starts an hour back")
	malformed := fs.Float64("malformed", 0.001, "share of readings sent malformed (dead letters)")
	late := fs.Float64("late", 0.001, "share of readings sent 5 simulated minutes late (dead letters)")
	outOfRange := fs.Float64("out-of-range", 0.0005, "share of readings with a value their kind cannot report (filtered)")
	seed := fs.Int("seed", 1, "seed of the random choices: a run is repeatable")
	every := fs.Duration("status-every", 5*time.Second, "how often a progress line is printed (0: never)")
	if err := parseFlags("loadgen sensors", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadgen sensors: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *homes < 1:
		return fmt.Errorf("-homes %d: want at least 1", *homes)
	case *kinds < 1 || *kinds > sensors.NumKinds:
		return fmt.Errorf("-kinds %d: want 1 to %d", *kinds, sensors.NumKinds)
	case *addKindAfter < 0:
		return fmt.Errorf("-add-kind-after %v: must not be negative", *addKindAfter)
	case *compression <= 0 || math.IsInf(*compression, 0) || math.IsNaN(*compression):
		return fmt.Errorf("-compression %v: want more than 0", *compression)
	case *minutes < 0:
		return fmt.Errorf("-minutes %d: must not be negative", *minutes)
	case *dur < 0:
		return fmt.Errorf("-duration %v: must not be negative", *dur)
	case *minutes > 0 && *dur > 0:
		return fmt.Errorf("-minutes %d and -duration %v: give one of them", *minutes, *dur)
	case *every < 0:
		return fmt.Errorf("-status-every %v: must not be negative", *every)
	case *seed < 1:
		return fmt.Errorf("-seed %d: want at least 1", *seed)
	}
	for _, s := range []struct {
		name string
		v    float64
	}{{"malformed", *malformed}, {"late", *late}, {"out-of-range", *outOfRange}} {
		if s.v < 0 || s.v > 0.5 || math.IsNaN(s.v) {
			return fmt.Errorf("-%s %v: want a share from 0 to 0.5", s.name, s.v)
		}
	}
	if sum := *malformed + *late + *outOfRange; sum > 0.5 {
		return fmt.Errorf("-malformed %v, -late %v, -out-of-range %v: together %v, want at most 0.5", *malformed, *late, *outOfRange, sum)
	}
	// The generator reads a zero share as its default: a share asked to be
	// 0 is given as the smallest one there is, which no draw falls under.
	share := func(v float64) float64 {
		if v == 0 {
			return math.SmallestNonzeroFloat64
		}
		return v
	}
	gcfg := sensors.GenConfig{Topic: *topic, Homes: *homes, Kinds: *kinds, AddKindAfter: *addKindAfter, Compression: *compression,
		Malformed: share(*malformed), Late: share(*late), OutOfRange: share(*outOfRange), Seed: uint64(*seed)}
	// Simulated time runs Compression times faster than the clock: a run
	// of known length starts that far back, so that it ends at the
	// clock, not after it (a broker may refuse timestamps ahead of its
	// clock: Kafka 4 by default an hour ahead). A run until interrupted
	// starts an hour back, the generator's default.
	span := time.Duration(*minutes) * time.Minute
	if *dur > 0 {
		span = time.Duration(float64(*dur) * *compression)
	}
	if span > 0 {
		gcfg.Start = time.Now().Add(-span - time.Minute).Truncate(time.Minute)
	}
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, cl, *topic)
	cancel()
	if err != nil {
		return err
	}
	runCtx := ctx
	if *dur > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	// The rate the settings ask for: a reading per sensor per simulated
	// minute, and a heartbeat per home every 5.
	want := func(k int) float64 { return float64(*homes) * (float64(k) + 0.2) * *compression / 60 }
	fmt.Fprintf(out, "sending the readings of %d homes (%d kinds of sensor) to %s at compression %v: %.0f readings/s, simulated time from %s\n",
		*homes, *kinds, *topic, *compression, want(*kinds), gen.SimNow().UTC().Format(time.RFC3339))
	if span == 0 {
		fmt.Fprintf(out, "  (until interrupted: simulated time reaches the clock after %v, then runs at the real rate, %.0f readings/s)\n",
			time.Duration(float64(time.Hour) / *compression).Round(time.Second), want(*kinds) / *compression)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- gen.Run(runCtx, cl, *minutes) }()
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	last, lastAt := int64(0), began
	for {
		select {
		case now := <-tick:
			sent := gen.Sent()
			fmt.Fprintf(out, "%6.1fs sent %d (%.0f/s, want %.0f/s), simulated %s, kinds %d\n", now.Sub(began).Seconds(), sent,
				float64(sent-last)/now.Sub(lastAt).Seconds(), want(gen.Kinds()), gen.SimNow().UTC().Format(time.RFC3339), gen.Kinds())
			last, lastAt = sent, now
			continue
		case err = <-done:
		}
		break
	}
	took := time.Since(began)
	valid, mal, lt, oor, hb := gen.Expected.Counts()
	fmt.Fprintf(out, "sent %d records in %v: %.0f/s (%d valid readings, %d malformed, %d late, %d out of range, %d heartbeats), simulated time %s\n",
		gen.Sent(), took.Round(time.Millisecond), float64(gen.Sent())/max(took.Seconds(), 1e-9), valid, mal, lt, oor, hb,
		gen.SimNow().UTC().Format(time.RFC3339))
	return err
}

// runSensorsDemo runs `sluice demo sensors`: the whole workload in one
// process on embedded defaults, verified at the end.
func runSensorsDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo sensors", flag.ContinueOnError)
	dur := fs.Duration("duration", 40*time.Second, "how long the load is sent")
	homes := fs.Int("homes", sensors.DefaultDemoHomes, "homes: a window write per home per simulated minute (the embedded Redis runs each in a Lua interpreter of its own: at compression 60 on 2 cores it keeps up with about 2,000)")
	kinds := fs.Int("kinds", 3, fmt.Sprintf("kinds of sensor at the start (1 to %d)", sensors.NumKinds))
	addKindAfter := fs.Duration("add-kind-after", 0, "add the next kind after this long (0: midway through -duration; -1s: never)")
	compression := fs.Float64("compression", 60, "simulated time per real time")
	instances := fs.Int("instances", 3, "instances at the start; a third of the way the second stops, two thirds of the way another joins")
	partitions := fs.Int("partitions", 16, "partitions of the readings topic")
	interval := fs.Duration("interval", 500*time.Millisecond, "ownership renewal interval: a member claims a partition per round at start")
	expiration := fs.Duration("expiration", 3*time.Second, "lease: a partition whose owner has not renewed it for this long is claimed by another")
	drain := fs.Duration("drain", time.Minute, "once the load is sent, how long to wait at most for every checkpoint to reach its log's end")
	listen := fs.String("listen", defaultListen["demo sensors"], `serve the residents' page (/homes) here ("" to turn off)`)
	if err := parseFlags("demo sensors", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo sensors: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *dur <= 0:
		return fmt.Errorf("-duration %v: must be more than 0", *dur)
	case *homes < 1:
		return fmt.Errorf("-homes %d: want at least 1", *homes)
	case *kinds < 1 || *kinds > sensors.NumKinds:
		return fmt.Errorf("-kinds %d: want 1 to %d", *kinds, sensors.NumKinds)
	case *compression <= 0 || math.IsInf(*compression, 0) || math.IsNaN(*compression):
		return fmt.Errorf("-compression %v: want more than 0", *compression)
	case dur.Seconds()**compression < 60:
		return fmt.Errorf("-duration %v at -compression %v: less than a simulated minute", *dur, *compression)
	case *instances < 2:
		return fmt.Errorf("-instances %d: want 2 at least (one of them stops)", *instances)
	case *partitions < 1 || *partitions > 1024:
		return fmt.Errorf("-partitions %d: want 1 to 1024", *partitions)
	case *interval <= 0:
		return fmt.Errorf("-interval %v: must be more than 0", *interval)
	case *expiration <= *interval:
		return fmt.Errorf("-expiration %v: must be more than -interval %v", *expiration, *interval)
	case *drain <= 0:
		return fmt.Errorf("-drain %v: must be more than 0", *drain)
	}
	cfg := sensors.DemoConfig{Homes: *homes, Kinds: *kinds, Compression: *compression, AddKindAfter: *addKindAfter,
		Duration: *dur, Partitions: int32(*partitions), Instances: *instances, Interval: *interval, Expiration: *expiration,
		Drain: *drain, Listen: *listen}
	// The workers' errors go to stderr. Their warnings are left out: a
	// joining member takes its share by stealing partitions, which the
	// owner that loses one logs as a warning (the status lines show the
	// moves).
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg.Logger = lg
	fmt.Fprintln(out, "sluice demo sensors: home-security readings on an embedded broker, aggregated per home and minute into an embedded Redis")
	fmt.Fprintln(out, "  readings (key: home) -> ownership balancer (partitions by Redis lease) -> parse (malformed: dead letter)")
	fmt.Fprintln(out, "  -> filter (heartbeats, out of range) -> window per home per minute (late: dead letter) -> write to Redis -> checkpoint")
	sum, err := sensors.RunDemo(ctx, cfg, out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, sum)
	if !sum.Interrupted && !sum.OK() {
		return errors.New("demo sensors: verification failed")
	}
	return nil
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
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
// until SIGINT/SIGTERM, then drains and commits.
//
// Everything the worker needs is checked before it joins its consumer
// group — the topics it reads and writes, Redis, its listen address — so
// that a misconfigured worker, restarted again and again, never holds
// partitions away from the healthy ones.
func runWorker(ctx context.Context, args []string) error {
	// The command table (help.go) calls it with the pipeline first.
	if len(args) == 0 || (args[0] != "delivery" && args[0] != "supervisor") {
		return errors.New("runWorker: the first argument must name the pipeline")
	}
	which := args[0]
	fs := flag.NewFlagSet("run "+which, flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	// Each pipeline takes only the flags it uses.
	requests, dead, redisURL, redisCA, levelTopics := "delivery-requests", "delivery-dead-letters", "", "", ""
	parallelism, staleAfter, horizon := delivery.DefaultParallelism, 10*time.Second, delivery.DefaultHorizon
	if which == "delivery" {
		fs.StringVar(&requests, "requests-topic", requests, "topic of delivery requests, unless -level-topics is set")
		fs.StringVar(&levelTopics, "level-topics", "",
			"topics of the levels of priority, high,normal,low (as sluice loadgen -level-topics writes them), read in place of -requests-topic: "+
				"weighted 6:3:1, a consumer group each (-group and the level: sluice-delivery-high, ...), so that under overload the low topic takes the lag")
		fs.StringVar(&dead, "dead-letter-topic", dead, "topic of the scheduler's dead letters: malformed and invalid requests")
		fs.StringVar(&redisURL, "redis", "", "Redis for the step records of the drone step (mode b): redis://[user:password@]host:port[/db], "+
			"rediss:// for TLS, or host:port; the password may come from $SLUICE_REDIS_PASSWORD instead. Empty: rely on idempotent backends")
		fs.StringVar(&redisCA, "redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
		fs.IntVar(&parallelism, "parallelism", parallelism, "calls in flight per step at most; an adaptive limit keeps it lower while the services need it")
		fs.DurationVar(&staleAfter, "stale-after", staleAfter,
			"with -redis: how long a drone booking may be in flight at its service; one left unanswered longer (its worker killed) is looked up there")
		fs.DurationVar(&horizon, "default-horizon", horizon,
			"how long after its first failure a request without a deadline may still be parked and replayed (0: 1h); "+
				"a request with one is replayed while it can still complete before it")
	}
	failures := fs.String("failures-topic", "delivery-failures", "topic of compensation events")
	group := fs.String("group", "sluice-"+which, "consumer group")
	instance := fs.String("instance-id", "",
		"static group membership (e.g. the pod's name): a restarted worker with the same id takes its partitions back at once, with no rebalance")
	backendsURL := fs.String("backends", "sim", `"sim" (in-process simulated services) or the base URL of the HTTP services`)
	listen := fs.String("listen", defaultListen["run "+which], "metrics, health and /status address")
	pprofOn := fs.Bool("pprof", false, "serve Go's profiles under /debug/pprof/ on the -listen address; they show the code, so keep the address private")
	session := fs.Duration("session-timeout", 10*time.Second, "how long the group waits for a silent worker before its partitions move to the others")
	policiesFile := fs.String("retry-policies", "",
		"JSON file of named retry policies (docs/retry-policies.json shows the form); $SLUICE_RETRY_<POLICY>_<FIELD> variables override fields")
	policyName := fs.String("retry-policy", which,
		`retry policy of the pipeline's calls, by name: "delivery" (5 quick attempts within 400 ms, timeouts that follow the services' latency) `+
			`and "supervisor" (undos: 10 attempts within a minute) are the workers' own; SLUICE_RETRY_DELIVERY_<FIELD> changes a field of one`)
	var transient flow.Statuses
	fs.TextVar(&transient, "transient-status", flow.Statuses{},
		`HTTP statuses the services' answers are retried and parked on, codes and ranges like "429,500-504", `+
			`in place of the retry policy's transient_status (default: the policy's, 408,429,500,502-504 for the scheduler, 408,429,500-599 for the supervisor)`)
	var lf logFlags
	lf.register(fs)
	var rf replayFlags
	rf.register(fs, which)
	if err := parseFlags("run", fs, args[1:]); err != nil {
		return err
	}
	logger, err := lf.logger(logOutput)
	if err != nil {
		return err
	}
	if err := rf.validate(which); err != nil {
		return err
	}
	for _, w := range oldEnvWarnings("run", fs) {
		logger.Warn(w)
	}
	if parallelism < 1 {
		return fmt.Errorf("-parallelism %d: must be at least 1", parallelism)
	}
	if horizon < 0 {
		return fmt.Errorf("-default-horizon %v: must not be negative (0: the default, %v)", horizon, delivery.DefaultHorizon)
	}
	if parked := rf.parkedFor(); which == "delivery" && redisURL != "" && rf.maxParkings > 0 && staleAfter >= parked {
		// A request whose drone booking has an unknown outcome waits,
		// parked, until the booking is stale enough to ask the service.
		return fmt.Errorf("-stale-after %v: a request with an unknown booking would be compensated before it could be "+
			"looked up: its parkings (-max-parkings %d, -replay-after %v, -max-replay-delay %v) wait %v in all; "+
			"lower -stale-after or allow more parkings", staleAfter, rf.maxParkings, rf.replayAfter, rf.maxReplayDelay, parked)
	}
	var ropts *redis.Options
	if redisURL != "" {
		if ropts, err = redisOptions(redisURL, redisCA); err != nil {
			return err
		}
	}
	// SLUICE_RETRY_POLICY and SLUICE_RETRY_POLICIES are flags', not
	// fields of a policy named "policy".
	ours := flagEnvNames("run", fs)
	var environ []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !ours[k] {
			environ = append(environ, kv)
		}
	}
	base := flow.DefaultRetryPolicies()
	base["delivery"], base["supervisor"] = delivery.DefaultRetry(), supervisor.DefaultRetry()
	policies, err := flow.LoadRetryPoliciesFrom(base, *policiesFile, environ)
	if err != nil {
		return err
	}
	p, err := policies.Get(*policyName)
	if err != nil {
		return fmt.Errorf("-retry-policy: %w", err)
	}
	if !transient.Empty() {
		p.TransientStatus = transient
	}
	retry := &p
	if which == "delivery" {
		if err := delivery.CheckRetry(p); err != nil {
			return fmt.Errorf("-retry-policy %s (with its SLUICE_RETRY_%s_ variables): %w", *policyName,
				strings.ToUpper(strings.ReplaceAll(*policyName, "-", "_")), err)
		}
		// Only the recorded drone step (mode b, with -redis) has marks
		// that turn stale.
		if redisURL != "" {
			if err := checkStaleAfter(staleAfter, retry, *policyName); err != nil {
				return err
			}
		}
	}
	var backends delivery.Backends
	if *backendsURL == "sim" {
		backends = delivery.Simulated(delivery.SimConfig{MinLatency: 2 * time.Millisecond, MaxLatency: 10 * time.Millisecond,
			PayingPrefix: loadgen.PayingPrefix}, delivery.NewLedger(), loadgen.SuspendedOwner)
	} else {
		calls := delivery.MaxCalls(parallelism)
		if which == "supervisor" {
			calls = supervisor.MaxCalls
		}
		backends = delivery.HTTPBackends(strings.TrimRight(*backendsURL, "/"), delivery.NewHTTPClient(calls))
	}
	input, outputs := requests, []string{*failures, dead}
	inputs := []string{input}
	if levels := splitComma(levelTopics); which == "delivery" && levelTopics != "" {
		if len(levels) != delivery.Levels {
			return fmt.Errorf("-level-topics %q: want %d topics, high,normal,low", levelTopics, delivery.Levels)
		}
		input, inputs = levelTopics, levels
	}
	if which == "supervisor" {
		input, inputs, outputs = *failures, []string{*failures}, []string{rf.deadLetterTopic}
	}

	// Before joining: the cluster and every topic, Redis, the address.
	// The producer's batches are sized to the topics it writes (limits).
	var limits topicLimits
	producer, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.WithLogger(kafka.NewLogger(logger)),
		kgo.ProducerBatchMaxBytesFn(limits.batchMax))...)
	if err != nil {
		return err
	}
	defer producer.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, producer, append(append(inputs, rf.retryTopic), outputs...)...)
	if err == nil {
		err = limits.check(cctx, producer, which, rf.retryTopic, *failures, outputs)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("the %s worker's topics: %w", which, err)
	}
	var rc *redis.Client
	if ropts != nil {
		rc = redis.NewClient(ropts)
		defer rc.Close()
		if err := checkRedis(ctx, rc, ropts); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	defer ln.Close()

	// Join: the input and the replays of what was parked.
	groupOpts := func(suffix string) []kgo.Opt {
		opts := []kgo.Opt{kgo.SessionTimeout(*session), kgo.HeartbeatInterval(max(100*time.Millisecond, *session/10))}
		if *instance != "" {
			opts = append(opts, kgo.InstanceID(*instance+suffix))
		}
		return opts
	}
	replayGroup := rf.replayGroup
	if replayGroup == "" {
		replayGroup = *group + "-replay"
	}
	members := &membership{cl: producer, logger: logger, instance: *instance}
	defer members.close()
	// One source, or one per level of priority, each in a group of its own.
	var srcs []*kafka.Source
	for l, topic := range inputs {
		grp, suffix := *group, ""
		if len(inputs) > 1 {
			suffix = "-" + delivery.LevelNames[l]
			grp += suffix
		}
		s, err := kafka.NewSource(ctx, kafka.Config{Conn: cf.conn(), Group: grp, Topics: []string{topic}, Logger: logger, Opts: groupOpts(suffix)})
		if err != nil {
			return err
		}
		members.add(s, grp, suffix)
		srcs = append(srcs, s)
	}
	src := srcs[0]
	replay, err := kafka.NewSource(ctx, kafka.Config{Conn: cf.conn(), Group: replayGroup, Topics: []string{rf.retryTopic},
		Logger: logger, Opts: groupOpts("-replay")})
	if err != nil {
		return fmt.Errorf("the %s worker's retry topic: %w", which, err)
	}
	members.add(replay, replayGroup, "-replay")
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, which)
	if err != nil {
		return err
	}

	var g *stream.Graph
	switch which {
	case "delivery":
		cfg := delivery.SchedulerConfig{Backends: backends, Producer: producer,
			FailuresTopic: *failures, DeadLetterTopic: dead, Parallelism: parallelism, Retry: retry, Metrics: m, Logger: logger,
			ParkTopic: rf.retryTopic, Replay: replay, ReplayCommitter: replay, ReplayAfter: rf.replayAfter,
			MaxReplayDelay: rf.maxReplayDelay, MaxParkings: rf.maxParkings, StaleAfter: staleAfter, DefaultHorizon: horizon}
		if len(srcs) == 1 {
			cfg.Source, cfg.Committer = src, src
		} else {
			for l, s := range srcs {
				cfg.Levels = append(cfg.Levels, source.Level[[]byte]{Name: "requests-" + delivery.LevelNames[l], Source: s})
			}
		}
		if rc != nil {
			steps := delivery.NewRedisSteps(rc, 24*time.Hour)
			defer steps.Close()
			cfg.Steps, cfg.NonIdempotent = steps, []delivery.Step{delivery.StepDrone}
		}
		sch, err := delivery.NewScheduler(cfg)
		if err != nil {
			return err
		}
		g = sch.Graph
	case "supervisor":
		if g, err = supervisor.New(supervisor.Config{Source: src, Committer: src, Backends: backends,
			Notifier: supervisor.NewNotifications(), Retry: retry, Metrics: m, Logger: logger,
			Producer: producer, RetryTopic: rf.retryTopic, DeadLetterTopic: rf.deadLetterTopic,
			Replay: replay, ReplayCommitter: replay, ReplayAfter: rf.replayAfter, MaxReplayDelay: rf.maxReplayDelay,
			MaxParkings: rf.maxParkings}); err != nil {
			return err
		}
	}
	ready := func(ctx context.Context) error {
		for _, s := range srcs {
			if err := s.Ready(ctx); err != nil {
				return err
			}
		}
		if err := replay.Ready(ctx); err != nil {
			return fmt.Errorf("replays: %w", err)
		}
		if rc != nil {
			if err := rc.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", describeRedis(ropts), err)
			}
		}
		return nil
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	addr, served, err := observe.Serve(srvCtx, observe.ServerConfig{Listener: ln, Gatherer: reg, Graphs: []*stream.Graph{g},
		Metrics: []*observe.Metrics{m}, Ready: ready, Pprof: *pprofOn})
	if err != nil {
		return err
	}
	logger.Info("worker running", "pipeline", which, "topic", input, "group", *group, "retry_topic", rf.retryTopic,
		"instance_id", *instance, "metrics", "http://"+addr+"/metrics")
	if onListen != nil {
		onListen(which, addr)
	}
	runErr := g.Run(ctx)
	members.leave = runErr != nil // a worker that fails hands its partitions over at once, static member or not
	closeErr := members.close()
	stopSrv()
	<-served
	return errors.Join(runErr, closeErr)
}

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// workerFlags are the flags of `sluice run delivery|supervisor`, checked,
// with what they make: the logger, the retry policy, the topics.
type workerFlags struct {
	which string // "delivery" or "supervisor"
	cf    connFlags
	rf    replayFlags
	lf    logFlags
	tf    traceFlags

	requests, dead, redisURL, redisCA, levelTopics string
	parallelism                                    int
	staleAfter, horizon, latencyTarget             time.Duration
	failures, group, instance, backendsURL, listen string
	pprof                                          bool
	session, summaryEvery                          time.Duration
	transport                                      *choiceFlag
	consumer                                       string        // with -transport redis: the worker's name in its groups
	reclaimAfter                                   time.Duration // with -transport redis: when a silent worker's entries move
	policiesFile, policyName                       string
	transient                                      flow.Statuses

	logger *slog.Logger
	fold   *retryFold // the retry warnings folded into the summaries
	ropts  *redis.Options
	retry  *flow.RetryPolicy
	// input names what the worker reads (for its first log line); inputs
	// are its topics, outputs the topics it writes besides its retry topic.
	input           string
	inputs, outputs []string
}

// parseWorkerFlags parses and checks the flags of `sluice run which`.
func parseWorkerFlags(which string, args []string) (*workerFlags, error) {
	f := &workerFlags{which: which}
	fs := flag.NewFlagSet("run "+which, flag.ContinueOnError)
	f.register(fs)
	if err := parseFlags("run", fs, args); err != nil {
		return nil, err
	}
	var err error
	if f.logger, f.fold, err = f.lf.workerLogger(logOutput, f.summaryEvery); err != nil {
		return nil, err
	}
	if err := f.rf.validate(which); err != nil {
		return nil, err
	}
	for _, w := range oldEnvWarnings("run", fs) {
		f.logger.Warn(w)
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	if err := f.tf.check(); err != nil {
		return nil, err
	}
	if err := f.consumerName(); err != nil {
		return nil, err
	}
	if f.redisURL != "" {
		if f.ropts, err = redisOptions(f.redisURL, f.redisCA); err != nil {
			return nil, err
		}
	}
	if err := f.retryPolicy(fs); err != nil {
		return nil, err
	}
	// What the worker will do, after the file, the variables and the
	// flags: not what the defaults say.
	if b, err := json.Marshal(f.retry); err == nil {
		f.logger.Info("retry policy", "policy", f.policyName, "effective", string(b))
	}
	return f, f.topics()
}

func (f *workerFlags) register(fs *flag.FlagSet) {
	f.cf.register(fs)
	// Each pipeline takes only the flags it uses.
	f.requests, f.dead = "delivery-requests", "delivery-dead-letters"
	f.parallelism, f.staleAfter, f.horizon = delivery.DefaultParallelism, 10*time.Second, delivery.DefaultHorizon
	f.latencyTarget = delivery.DefaultLatencyTarget
	if f.which == "delivery" {
		fs.StringVar(&f.requests, "requests-topic", f.requests, "topic of delivery requests, unless -level-topics is set")
		fs.StringVar(&f.levelTopics, "level-topics", "",
			"topics of the levels of priority, high,normal,low (as sluice loadgen -level-topics writes them), read in place of -requests-topic: "+
				"weighted 6:3:1, a consumer group each (-group and the level: sluice-delivery-high, ...), so that under overload the low topic takes the lag")
		fs.StringVar(&f.dead, "dead-letter-topic", f.dead, "topic of the scheduler's dead letters: malformed and invalid requests")
		fs.StringVar(&f.redisURL, "redis", "", "Redis for the step records of the drone step (mode b), and with -transport redis for the "+
			"streams too: redis://[user:password@]host:port[/db], rediss:// for TLS, or host:port; the password may come from "+
			"$SLUICE_REDIS_PASSWORD instead. Empty (Kafka only): rely on idempotent backends")
		fs.IntVar(&f.parallelism, "parallelism", f.parallelism, "calls in flight per step at most; an adaptive limit keeps it lower while the services need it")
		fs.DurationVar(&f.latencyTarget, "latency-target", f.latencyTarget,
			"the p99 latency of a service's calls that each step's adaptive limit holds: past it the step lowers its calls "+
				"in flight (never under 8) and the rest wait in the worker and in Kafka; raise it for services that are slower "+
				"by nature, or to push a saturated service harder at the cost of its latency")
		fs.DurationVar(&f.staleAfter, "stale-after", f.staleAfter,
			"with -redis: how long a drone booking may be in flight at its service; one left unanswered longer (its worker killed) is looked up there")
		fs.DurationVar(&f.horizon, "default-horizon", f.horizon,
			"how long after its first failure a request without a deadline may still be parked and replayed (0: 1h); "+
				"a request with one is replayed while it can still complete before it")
	}
	if f.which == "supervisor" {
		fs.StringVar(&f.redisURL, "redis", "", "with -transport redis: the Redis server of the streams, redis://[user:password@]host:port[/db], "+
			"rediss:// for TLS, or host:port; the password may come from $SLUICE_REDIS_PASSWORD instead")
	}
	fs.StringVar(&f.redisCA, "redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
	f.transport = transportVar(fs)
	fs.StringVar(&f.consumer, "consumer", "",
		"with -transport redis: this worker's name in its consumer groups (default: -instance-id, else $HOSTNAME); "+
			"restarted under the same name, a worker at once reads again what it had read and not finished; "+
			"every worker running at once needs a name of its own")
	fs.DurationVar(&f.reclaimAfter, "reclaim-after", 30*time.Second,
		"with -transport redis: how long what a stopped or killed worker had read and not finished waits before the others "+
			"take it over (a live worker keeps its own, however long it takes, renewing them every third of this)")
	fs.StringVar(&f.failures, "failures-topic", "delivery-failures", "topic of compensation events")
	fs.StringVar(&f.group, "group", "sluice-"+f.which, "consumer group")
	fs.StringVar(&f.instance, "instance-id", "",
		"static group membership (e.g. the pod's name): a restarted worker with the same id takes its partitions back at once, with no rebalance")
	fs.StringVar(&f.backendsURL, "backends", "sim", `"sim" (in-process simulated services) or the base URL of the HTTP services`)
	fs.StringVar(&f.listen, "listen", defaultListen["run "+f.which], "metrics, health and /status address")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on the -listen address; they show the code, so keep the address private")
	fs.DurationVar(&f.session, "session-timeout", 10*time.Second, "how long the group waits for a silent worker before its partitions "+
		"move to the others (Kafka; on Redis, -reclaim-after)")
	fs.DurationVar(&f.summaryEvery, "summary-every", 10*time.Second,
		"log summary lines this often: rates in and out, lag, in flight, outcomes and retries by reason since the last ones; "+
			"the retry warnings after the first of each stage and reason are folded into them (0: no summaries, every retry warning logged)")
	fs.StringVar(&f.policiesFile, "retry-policies", "",
		"JSON file of named retry policies (docs/retry-policies.json shows the form); $SLUICE_RETRY_<POLICY>_<FIELD> variables override fields")
	fs.StringVar(&f.policyName, "retry-policy", f.which,
		`retry policy of the pipeline's calls, by name: "delivery" (5 quick attempts within 400 ms, each timeout following the services' latency, 200 ms to 1 s) `+
			`and "supervisor" (undos: 10 attempts within a minute) are the workers' own; SLUICE_RETRY_DELIVERY_<FIELD> changes a field of one`)
	fs.TextVar(&f.transient, "transient-status", flow.Statuses{},
		`HTTP statuses the services' answers are retried and parked on, codes and ranges like "429,500-504", `+
			`in place of the retry policy's transient_status (default: the policy's, 408,429,500,502-504 for the scheduler, 408,429,500-599 for the supervisor)`)
	f.lf.register(fs)
	f.rf.register(fs, f.which)
	f.tf.register(fs, "sluice-"+f.which, true)
}

// check checks the flags that need no lookup.
func (f *workerFlags) check() error {
	if f.redisTransport() && f.redisURL == "" {
		return errors.New("-transport redis: -redis is needed, the Redis server whose streams the worker reads and writes " +
			"(redis://[user:password@]host:port[/db], rediss:// for TLS, or host:port)")
	}
	if f.redisTransport() && f.reclaimAfter <= 0 {
		return fmt.Errorf("-reclaim-after %v: must be positive", f.reclaimAfter)
	}
	if f.parallelism < 1 {
		return fmt.Errorf("-parallelism %d: must be at least 1", f.parallelism)
	}
	if f.latencyTarget <= 0 {
		return fmt.Errorf("-latency-target %v: must be positive", f.latencyTarget)
	}
	if f.horizon < 0 {
		return fmt.Errorf("-default-horizon %v: must not be negative (0: the default, %v)", f.horizon, delivery.DefaultHorizon)
	}
	if f.summaryEvery < 0 {
		return fmt.Errorf("-summary-every %v: must not be negative (0: no summaries)", f.summaryEvery)
	}
	rf := f.rf
	if parked := rf.parkedFor(); f.which == "delivery" && f.redisURL != "" && rf.maxParkings > 0 && f.staleAfter >= parked {
		// A request whose drone booking has an unknown outcome waits,
		// parked, until the booking is stale enough to ask the service.
		return fmt.Errorf("-stale-after %v: a request with an unknown booking would be compensated before it could be "+
			"looked up: its parkings (-max-parkings %d, -replay-after %v, -max-replay-delay %v) wait %v in all; "+
			"lower -stale-after or allow more parkings", f.staleAfter, rf.maxParkings, rf.replayAfter, rf.maxReplayDelay, parked)
	}
	return nil
}

// retryPolicy loads the retry policy of the pipeline's calls.
func (f *workerFlags) retryPolicy(fs *flag.FlagSet) error {
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
	policies, err := flow.LoadRetryPoliciesFrom(base, f.policiesFile, environ)
	if err != nil {
		return err
	}
	p, err := policies.Get(f.policyName)
	if err != nil {
		return fmt.Errorf("-retry-policy: %w", err)
	}
	if !f.transient.Empty() {
		p.TransientStatus = f.transient
	}
	f.retry = &p
	if f.which != "delivery" {
		return nil
	}
	if err := delivery.CheckRetry(p); err != nil {
		return fmt.Errorf("-retry-policy %s (with its SLUICE_RETRY_%s_ variables): %w", f.policyName,
			strings.ToUpper(strings.ReplaceAll(f.policyName, "-", "_")), err)
	}
	// Only the recorded drone step (mode b, with -redis) has marks that
	// turn stale.
	if f.redisURL != "" {
		return checkStaleAfter(f.staleAfter, f.retry, f.policyName)
	}
	return nil
}

// topics sets the topics the worker reads and writes.
func (f *workerFlags) topics() error {
	f.input, f.outputs = f.requests, []string{f.failures, f.dead}
	f.inputs = []string{f.input}
	if levels := splitComma(f.levelTopics); f.which == "delivery" && f.levelTopics != "" {
		if len(levels) != delivery.Levels {
			return fmt.Errorf("-level-topics %q: want %d topics, high,normal,low", f.levelTopics, delivery.Levels)
		}
		f.input, f.inputs = f.levelTopics, levels
	}
	if f.which == "supervisor" {
		f.input, f.inputs, f.outputs = f.failures, []string{f.failures}, []string{f.rf.deadLetterTopic}
	}
	return nil
}

// backends are the services the pipeline calls: simulated in-process, or
// over HTTP.
func (f *workerFlags) backends() delivery.Backends {
	if f.backendsURL == "sim" {
		return delivery.Simulated(delivery.SimConfig{MinLatency: 2 * time.Millisecond, MaxLatency: 10 * time.Millisecond,
			PayingPrefix: loadgen.PayingPrefix}, delivery.NewLedger(), loadgen.SuspendedOwner)
	}
	calls := delivery.MaxCalls(f.parallelism)
	if f.which == "supervisor" {
		calls = supervisor.MaxCalls
	}
	return delivery.HTTPBackends(strings.TrimRight(f.backendsURL, "/"), delivery.NewHTTPClient(calls))
}

// redisTransport reports whether the worker reads and writes Redis
// streams (-transport redis) rather than Kafka topics.
func (f *workerFlags) redisTransport() bool { return f.transport.value == transportRedis }

// consumerName sets -consumer's default: -instance-id, else the host's
// name ($HOSTNAME: a pod's name).
func (f *workerFlags) consumerName() error {
	if !f.redisTransport() || f.consumer != "" {
		return nil
	}
	if f.consumer = f.instance; f.consumer == "" {
		f.consumer = os.Getenv("HOSTNAME")
	}
	if f.consumer == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return fmt.Errorf("-consumer: the host has no name to default to (%v): name the worker", err)
		}
		f.consumer = h
	}
	return nil
}

// transportAttrs are the worker's first log line's attributes that say
// where it reads and writes.
func (f *workerFlags) transportAttrs() []any {
	if f.redisTransport() {
		return []any{"transport", transportRedis, "redis", describeRedis(f.ropts), "consumer", f.consumer}
	}
	return []any{"transport", transportKafka, "instance_id", f.instance}
}

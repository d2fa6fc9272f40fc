// Command sluice is the worker binary. Subcommands:
//
//	sluice demo      the drone delivery scheduler, everything in one process
//	                 on embedded defaults, with a live status line and a
//	                 verification summary
//	sluice demo sensors  the home-security workload in one process: three
//	                 instances sharing the partitions through Redis leases,
//	                 one stopped and one added, verified at the end
//	sluice run       delivery|supervisor: a worker against a real cluster (the
//	                 supervisor parks compensations it cannot do now on a
//	                 retry topic, replays them, and dead-letters the ones it
//	                 never can); sensors: one instance of the home-security
//	                 workload
//	sluice services  the simulated backends over HTTP, shared by the workers
//	                 (-backends URL), with their side-effect ledger on /ledger;
//	                 they fail on purpose on a schedule (-fault) or on demand
//	                 (/admin/faults on -admin-listen)
//	sluice loadgen   produce delivery requests to a real cluster; -record
//	                 FILE keeps what was sent for verify; "sensors": the
//	                 home-security readings
//	sluice verify    check a run of separate processes against the load
//	                 generator's record, the services' ledger and the
//	                 dead-letter topics, as the demo checks its own
//	sluice deadletters  list a dead-letter topic (counts by stage and reason,
//	                 the records); "replay" sends selected ones back to their
//	                 original topic, once per request id
//	sluice checkpoints  list the partition ownership records and checkpoints
//	                 kept in Redis for a stream and group; "set" rewinds (or
//	                 moves forward) a partition's checkpoint
//	sluice broker    a standalone in-process Kafka-compatible dev broker
//	sluice version   the version and those of the dependencies compiled in
//
// With broker, services, the two workers, loadgen and verify, the whole
// system runs as separate processes, on one machine or several.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
)

func main() {
	os.Exit(exit(run(os.Args[1:]), os.Stderr))
}

// exit prints err, the command's, as the process's last line on w (as a
// JSON line through the command's log if it logs JSON) and returns the
// exit code: 0 without an error or after -h (the flags were printed), 1
// otherwise.
func exit(err error, w io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "sluice:") { // the engine's errors say it already
		msg = "sluice: " + msg
	}
	printError(w, msg)
	return 1
}

func usage() error {
	return fmt.Errorf(`usage:
  sluice demo [-rate N] [-burst N] [-duration D] [-backends sim|http] [-redis embedded|host:port|none]
              [-overload] [-overload-rate 25000] [-mix 0.1,0.3,0.6] [-priority weighted|strict-aging] [-parallelism 1024]
              [-transient 0.01] [-throttle 0.002] [-permanent 0] [-min-latency 2ms] [-max-latency 10ms] [-retry-after 0]
              [-listen 127.0.0.1:9464]
  sluice run delivery|supervisor [-brokers host:port,...] [-backends sim|URL] [-instance-id ID] [-log-format text|json] [-log-level info]
              [-retry-topic T] [-replay-after D] [-max-replay-delay D] [-max-parkings N] [-tls] [-sasl-mechanism M]
              [-retry-policies FILE] [-retry-policy delivery|supervisor|NAME] [-transient-status 408,429,500-504] ...
  sluice run delivery [-redis redis://[user:pass@]host:port[/db]|rediss://...] [-parallelism 1024] [-stale-after 10s]
              [-level-topics high,normal,low (in place of -requests-topic)] [-default-horizon 1h]
              [-retry-topic delivery-requests-retry] [-replay-after 2s] [-max-replay-delay 1m] [-max-parkings 0 (no bound)] ...
  sluice run supervisor [-retry-topic delivery-failures-retry] [-supervisor-dead-letter-topic delivery-compensation-dead-letters]
              [-replay-after 5s] [-max-replay-delay 30s] [-max-parkings 0 (no bound)] ...
  sluice demo sensors [-duration 40s] [-homes 2000] [-kinds 3] [-add-kind-after D] [-compression 60] [-instances 3]
              [-partitions 16] [-interval 500ms] [-expiration 3s] [-drain 1m] [-listen 127.0.0.1:9465]
  sluice run sensors [-brokers host:port,...] [-redis redis://[user:pass@]host:port[/db]|host:port] [-namespace sensors] [-group sensors]
              [-instance-id host:pid] [-topic sensor-readings] [-dead-letter-topic sensor-readings-dead-letters] [-interval 10s]
              [-expiration 1m] [-lateness 30s] [-idle-close D] [-listen 127.0.0.1:9465] [-status-every 5s] ...
  sluice services [-listen 127.0.0.1:8080] [-admin-listen 127.0.0.1:0] [-drones non-idempotent|idempotent]
              [-fault SERVICE:status=N|latency=+D|down[:after=D][:for=D]]...
              [-transient 0.01] [-throttle 0.002] [-permanent 0] [-min-latency 2ms] [-max-latency 10ms] [-retry-after 0]
  sluice loadgen [-brokers host:port,...] [-rate N] [-burst N] [-duration D] [-record FILE]
              [-level-topics high,normal,low] [-mix 0.1,0.3,0.6] [-untagged 0.3]
  sluice loadgen sensors [-brokers host:port,...] [-homes 100000] [-kinds 3] [-add-kind-after D] [-compression 60]
              [-minutes N | -duration D] [-malformed 0.001] [-late 0.001] [-out-of-range 0.0005]
  sluice verify -record FILE [-services http://127.0.0.1:8080] [-brokers host:port,...] [-wait 1m]
              [-dead-letter-topic delivery-dead-letters] [-supervisor-dead-letter-topic delivery-compensation-dead-letters]
  sluice deadletters [-topic delivery-dead-letters] [-reason TEXT] [-stage S] [-key ID] [-since 2h] [-limit 20] [-json]
  sluice deadletters replay [-topic T] [-reason TEXT] [-stage S] [-key ID] [-since 2h] [-to TOPIC] [-rate 100] [-dry-run] [-again]
  sluice checkpoints [list|set] -stream TOPIC -group G [-redis host:port|redis://...] [-namespace sluice] [-partitions 16]
              [-expiration 1m] [-partition P -offset O (set)]
  sluice broker [-port 9092] [-partitions 16] [-topics ` + defaultTopics + `]
  sluice version
Every flag defaults to a variable: $SLUICE_<FLAG> for run and the connection flags (-brokers, -tls, -sasl-*),
$SLUICE_<COMMAND>_<FLAG> for the other commands; "sluice <command> -h" names each beside its flag.`)
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "demo":
		if len(args) > 1 && args[1] == "sensors" {
			return runSensorsDemo(ctx, args[2:], os.Stdout)
		}
		def := demo.Defaults(30 * time.Second)
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		rate := fs.Float64("rate", def.Rate, "delivery requests per second")
		burst := fs.Float64("burst", def.BurstRate, "request rate during bursts (3 s every 10 s)")
		dur := fs.Duration("duration", def.Duration, "how long to send load before draining")
		listen := fs.String("listen", "127.0.0.1:9464", `serve /metrics, /healthz, /readyz and the live /status page here ("" to turn off)`)
		backends := fs.String("backends", "sim", "sim: services called in-process; http: the same services behind HTTP servers on loopback")
		var sim simFlags
		sim.register(fs, def.Sim)
		redisAddr := fs.String("redis", demo.EmbeddedRedis, `where the step records of the non-idempotent drone step go (mode b): "embedded" (an in-process Redis-compatible server), host:port of a Redis server, or "none" (every service idempotent, mode a)`)
		overload := fs.Bool("overload", false, fmt.Sprintf("in place of the bursts, one phase of %v at -overload-rate, %v into the load (which lasts %v at least): "+
			"high-priority requests stay fast, low ones take the lag", demo.OverloadFor, demo.OverloadAt, 2*demo.OverloadAt+demo.OverloadFor))
		overloadRate := fs.Float64("overload-rate", 25_000, "request rate of the -overload phase: twice the ~12,000/s this 2-core machine completes "+
			"in one process with the demo's defaults (with -redis none it holds ~40,000/s: give 80000)")
		parallelism := fs.Int("parallelism", delivery.DefaultParallelism, "calls in flight per step at most "+
			"(with -overload 256 unless given: on 2 cores, calls beyond what the CPUs serve only queue for them, first come first served, "+
			"whatever their level)")
		mixFlag := fs.String("mix", "0.1,0.3,0.6", "share of requests of each level of priority, high,normal,low (a topic each)")
		policy := fs.String("priority", "weighted", `how the scheduler reads the levels' topics: "weighted" (6:3:1, every level keeps a share) or "strict-aging" `+
			`(high first; normal and low requests older than 2 s and 5 s served a level up)`)
		if err := parseFlags("demo", fs, args[1:]); err != nil {
			return err
		}
		cfg := def
		cfg.Rate, cfg.BurstRate, cfg.Duration, cfg.Listen, cfg.Redis = *rate, *burst, *dur, *listen, *redisAddr
		var err error
		if cfg.Mix, err = parseMix(*mixFlag); err != nil {
			return err
		}
		switch *policy {
		case "weighted":
			cfg.Policy = delivery.DefaultPolicy()
		case "strict-aging":
			cfg.Policy = backpressure.StrictPriority(delivery.Levels).Aging(0, 2*time.Second, 5*time.Second)
		default:
			return fmt.Errorf("-priority %q: want weighted or strict-aging", *policy)
		}
		cfg.Parallelism = *parallelism
		if *overload {
			// The phase's backlog drains at what the machine holds less
			// -rate: unless told, the rest of the load is light and the
			// drain long enough.
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if !set["rate"] {
				cfg.Rate = 5_000
			}
			if !set["parallelism"] {
				cfg.Parallelism = 256
			}
			cfg.Drain = 90 * time.Second
			cfg = demo.Overload(cfg, *overloadRate)
		}
		if cfg.Sim, err = sim.config(); err != nil {
			return err
		}
		if cfg.Redis == "none" {
			cfg.Redis = ""
		}
		switch *backends {
		case "sim":
		case "http":
			cfg.HTTP = true
		default:
			return fmt.Errorf("-backends %q: want sim or http", *backends)
		}
		if *overload {
			fmt.Printf("sluice demo: drone delivery scheduler on an embedded broker, %.0f req/s for %v with %v at %.0f/s from %v (overload)\n",
				cfg.Rate, cfg.Duration, cfg.BurstFor, cfg.BurstRate, cfg.BurstAt)
		} else {
			fmt.Printf("sluice demo: drone delivery scheduler on an embedded broker, %.0f req/s with bursts of %.0f/s for %v\n",
				cfg.Rate, cfg.BurstRate, cfg.Duration)
		}
		fmt.Printf("  requests-high, -normal, -low (%s of the load) -> priority (%s) -> parse -> validate -> check_account -> prioritize (own priority, else tier)\n",
			*mixFlag, cfg.Policy)
		fmt.Println("  -> create_package -> check_third_party -> schedule_drone -> create_delivery -> checkpoint (every step served by level)")
		fmt.Println("  failures after some steps -> supervisor (undo every side effect; parks and replays what fails for now,")
		fmt.Println("  dead-letters what never can); bad input -> dead letters")
		sum, err := demo.Run(ctx, cfg, os.Stdout)
		fmt.Println(sum)
		if err != nil {
			return err
		}
		if !sum.OK() {
			return fmt.Errorf("verification failed")
		}
		return nil
	case "run":
		if len(args) > 1 && args[1] == "sensors" {
			return runSensorsWorker(ctx, args[2:])
		}
		return runWorker(ctx, args[1:])
	case "version":
		bi, ok := readBuildInfo()
		return printVersion(os.Stdout, bi, ok)
	case "help", "-h", "-help", "--help":
		fmt.Println(strings.TrimPrefix(usage().Error(), "usage:\n"))
		return nil
	case "loadgen":
		if len(args) > 1 && args[1] == "sensors" {
			return runSensorsLoadgen(ctx, args[2:], os.Stdout)
		}
		return runLoadgen(ctx, args[1:])
	case "services":
		return runServices(ctx, args[1:])
	case "verify":
		return runVerify(ctx, args[1:])
	case "deadletters":
		return runDeadLetters(ctx, args[1:])
	case "checkpoints":
		return runCheckpoints(ctx, args[1:], os.Stdout)
	case "broker":
		fs := flag.NewFlagSet("broker", flag.ContinueOnError)
		port := fs.Int("port", 9092, "port on 127.0.0.1")
		parts := fs.Int("partitions", 16, "partitions of each topic")
		topics := fs.String("topics", defaultTopics, "topics to create")
		if err := parseFlags("broker", fs, args[1:]); err != nil {
			return err
		}
		ts := splitComma(*topics)
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(*port), kfake.SeedTopics(int32(*parts), ts...))
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Printf("dev broker (in-memory, Kafka protocol) on %v with topics %v; Ctrl-C stops it\n", c.ListenAddrs(), ts)
		<-ctx.Done()
		return nil
	default:
		return usage()
	}
}

// defaultTopics are the topics the dev broker creates: the scheduler's
// requests, failures (compensation events), dead letters and retry topic
// (parked requests), the supervisor's retry and dead-letter topics, and the
// requests' topics of the levels of priority (-level-topics).
const defaultTopics = "delivery-requests,delivery-failures,delivery-dead-letters,delivery-requests-retry," +
	"delivery-failures-retry,delivery-compensation-dead-letters," +
	"delivery-requests-high,delivery-requests-normal,delivery-requests-low"

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// Command sluice is the worker binary: the ready pipelines (the drone
// delivery scheduler, its supervisor, the sensors aggregation), their
// demos, load generators, simulated services and a dev broker, and the
// tools to operate them (dead letters, checkpoints). `sluice -h` lists the
// commands, from the table in help.go; `sluice help <command>` gives one's
// flags.
//
// With broker, services, the workers, loadgen and verify, the whole
// system runs as separate processes, on one machine or several.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
// exit code: 0 without an error or after -h (the flags were printed), 2
// for a command line sluice cannot make sense of (usageError), 1
// otherwise.
func exit(err error, w io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(w, ue.msg)
		return 2
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "sluice:") { // the engine's errors say it already
		msg = "sluice: " + msg
	}
	printError(w, msg)
	return 1
}

func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return dispatch(ctx, args)
}

// runDemo is `sluice demo`: the drone delivery scheduler, everything in
// one process on embedded defaults, with a live status page and a
// verification summary.
func runDemo(ctx context.Context, args []string) error {
	def := demo.Defaults(30 * time.Second)
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	rate := fs.Float64("rate", def.Rate, "delivery requests per second")
	burst := fs.Float64("burst", def.BurstRate, "request rate during bursts (3 s every 10 s)")
	dur := fs.Duration("duration", def.Duration, "how long to send load before draining")
	listen := fs.String("listen", defaultListen["demo"], `serve /metrics, /healthz, /readyz and the live /status page here ("" to turn off)`)
	backends := choiceVar(fs, "backends", "sim", "where the services run",
		choice{"sim", "called in-process"}, choice{"http", "the same services behind HTTP servers on loopback"})
	var sim simFlags
	sim.register(fs, def.Sim)
	redisAddr := fs.String("redis", demo.EmbeddedRedis, `where the step records of the non-idempotent drone step go (mode b), and with -transport redis the streams: "embedded" (an in-process Redis-compatible server), a Redis server (host:port, or redis://[user:password@]host:port[/db], rediss:// for TLS; the password may come from $SLUICE_REDIS_PASSWORD), or "none" (every service idempotent, mode a; Kafka only)`)
	redisCA := fs.String("redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
	transport := transportVar(fs)
	overload := fs.Bool("overload", false, fmt.Sprintf("in place of the bursts, one phase of %v at -overload-rate, %v into the load (which lasts %v at least): "+
		"high-priority requests stay fast, low ones take the lag", demo.OverloadFor, demo.OverloadAt, 2*demo.OverloadAt+demo.OverloadFor))
	overloadRate := fs.Float64("overload-rate", 25_000, "request rate of the -overload phase: twice the ~12,000/s a 2-core machine completes "+
		"in one process with the demo's defaults (with -redis none it holds ~40,000/s: give 80000)")
	parallelism := fs.Int("parallelism", delivery.DefaultParallelism, "calls in flight per step at most "+
		"(with -overload 256 unless given: on 2 cores, calls beyond what the CPUs serve only queue for them, first come first served, "+
		"whatever their level)")
	mixFlag := fs.String("mix", "0.1,0.3,0.6", "share of requests of each level of priority, high,normal,low (a topic each)")
	policy := choiceVar(fs, "priority", "weighted", "how the scheduler reads the levels' topics",
		choice{"weighted", "6:3:1, every level keeps a share"},
		choice{"strict-aging", "high first; normal and low requests older than 2 s and 5 s served a level up"})
	var trf traceFlags
	trf.register(fs, "sluice-demo", false)
	if err := parseFlags("demo", fs, args); err != nil {
		return err
	}
	if err := checkRates(*rate, *burst); err != nil {
		return err
	}
	if err := trf.check(); err != nil {
		return err
	}
	cfg := def
	cfg.Rate, cfg.BurstRate, cfg.Duration, cfg.Listen, cfg.Redis = *rate, *burst, *dur, *listen, *redisAddr
	var err error
	if cfg.Mix, err = parseMix(*mixFlag); err != nil {
		return err
	}
	switch policy.value {
	case "weighted":
		cfg.Policy = delivery.DefaultPolicy()
	case "strict-aging":
		cfg.Policy = backpressure.StrictPriority(delivery.Levels).Aging(0, 2*time.Second, 5*time.Second)
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
		if transport.value == transportRedis {
			return errors.New(`-redis none: -transport redis keeps the streams on Redis: give "embedded" or the host:port of a server`)
		}
		cfg.Redis = ""
	}
	cfg.Transport = transport.value
	if cfg.Redis != "" && cfg.Redis != demo.EmbeddedRedis {
		if cfg.RedisOptions, err = redisOptions(cfg.Redis, *redisCA); err != nil {
			return err
		}
		cfg.Redis = cfg.RedisOptions.Addr
	}
	cfg.HTTP = backends.value == "http"
	traces := trf.start(slog.Default(), "")
	defer traces.Shutdown(slog.Default())
	cfg.TracerProvider = traces.Provider()
	printDemoHeader(cfg, *overload, *mixFlag)
	sum, err := demo.Run(ctx, cfg, os.Stdout)
	if err != nil {
		// The run did not reach its verification: no verdict to print.
		return err
	}
	fmt.Println(sum)
	if !sum.OK() {
		return fmt.Errorf("verification failed")
	}
	return nil
}

// printDemoHeader says what the demo runs, in lines of at most 120
// columns.
func printDemoHeader(cfg demo.Config, overload bool, mix string) {
	if cfg.Transport == demo.TransportRedis {
		fmt.Println("sluice demo: the drone delivery scheduler on Redis streams")
	} else {
		fmt.Println("sluice demo: the drone delivery scheduler on an embedded broker")
	}
	if overload {
		fmt.Printf("  load: %.0f req/s for %v, with %v at %.0f/s from %v (overload)\n",
			cfg.Rate, cfg.Duration, cfg.BurstFor, cfg.BurstRate, cfg.BurstAt)
	} else {
		fmt.Printf("  load: %.0f req/s for %v, with bursts of %.0f/s\n", cfg.Rate, cfg.Duration, cfg.BurstRate)
	}
	fmt.Printf("  requests-high, -normal, -low (shares %s) -> priority (%s)\n", mix, cfg.Policy)
	fmt.Println("  -> parse -> validate -> check_account -> prioritize (own priority, else tier) -> create_package")
	fmt.Println("  -> check_third_party -> schedule_drone -> create_delivery -> checkpoint (every step served by level)")
	fmt.Println("  failures after some steps -> supervisor (undo every side effect; parks and replays what fails for now,")
	fmt.Println("  dead-letters what never can); bad input -> dead letters")
}

// runBroker is `sluice broker`: a standalone in-process Kafka-compatible
// dev broker holding the workers' topics.
func runBroker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	port := fs.Int("port", defaultBrokerPort, "port on 127.0.0.1")
	parts := fs.Int("partitions", 16, "partitions of each topic")
	topics := fs.String("topics", defaultTopics, "topics to create")
	if err := parseFlags("broker", fs, args); err != nil {
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
}

// runVersion is `sluice version`.
func runVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags("version", fs, args); err != nil {
		return err
	}
	bi, ok := readBuildInfo()
	return printVersion(os.Stdout, bi, ok)
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

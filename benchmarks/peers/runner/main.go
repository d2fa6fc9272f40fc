// Command runner is the peers benchmark of issue 18: sluice against
// Confluent parallel-consumer, Watermill and a hand-written franz-go
// consumer (go-streams' Kafka connector has no module to build; see
// DefaultImpls), each a process of its own consuming the
// same topic of a real Apache Kafka 4.1 broker on loopback, with the same
// asynchronous work and the same guarantee. It prints one markdown table
// (and writes it to -out).
//
// It starts the broker from the jars named by $SLUICE_KAFKA_LIBS
// (internal/testenv/kafka/fetch-jars.sh; make bench-peers does both),
// creates topic "peers" (16 partitions) and fills it once, then for each
// implementation and order: starts it in a fresh group, samples time and
// the process's CPU (/proc/<pid>/stat) when it says it has its first
// record and again when the group's committed offsets equal the log end,
// sends SIGTERM and reads its final line (counts and latencies).
//
// The implementations (benchmarks/peers/<name>) take the flags -brokers,
// -topic, -group, -order unordered|key, -inflight and -work, and speak the
// stdout protocol of their "first" and "final" JSON lines; see
// benchmarks/peers/internal/peer for the Go side of it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
)

func main() {
	records := flag.Int("records", 500_000, "records in the topic")
	impls := flag.String("impl", strings.Join(DefaultImpls, ","), "implementations to run, in order")
	orders := flag.String("order", "unordered,key", "orders to run each implementation in")
	timeout := flag.Duration("timeout", 3*time.Minute, "limit of each run, from its first record to committed == end")
	out := flag.String("out", "", "also write the table to this file")
	libs := flag.String("kafka-libs", os.Getenv(testenv.KafkaLibsEnv), "folder of the broker's jars (default $"+testenv.KafkaLibsEnv+")")
	profile := flag.String("cpuprofile", "", "write CPU profiles of the main module's Go implementations (sluice, franzgo) to FILE-<impl>-<order>.pprof")
	flag.Parse()
	if err := run(*records, split(*impls), split(*orders), *timeout, *out, *libs, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(records int, impls, orders []string, timeout time.Duration, out, libs, profile string) error {
	for _, name := range impls {
		if _, ok := hows[name]; !ok {
			return fmt.Errorf("unknown implementation %q (known: %s)", name, strings.Join(DefaultImpls, ", "))
		}
	}
	for _, o := range orders {
		if o != "unordered" && o != "key" {
			return fmt.Errorf("unknown order %q (unordered, key)", o)
		}
	}
	root, err := findRoot()
	if err != nil {
		return err
	}
	logs, err := os.MkdirTemp("", "sluice-peers-logs-")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	began := time.Now()
	broker, err := testenv.StartKafka(libs)
	if err != nil {
		return err
	}
	defer broker.Stop()
	fmt.Fprintf(os.Stderr, "peers: Apache Kafka 4.1.0 on %s, started in %v; stderr of each run in %s\n", broker.Addr, time.Since(began).Round(time.Millisecond), logs)
	cfg := Config{
		Brokers:  []string{broker.Addr},
		Workload: Workload{Topic: "peers", Partitions: 16, Records: records, ValueSize: 200, Keys: 10_000},
		Inflight: 256,
		Work:     2 * time.Millisecond,
		Impls:    impls,
		Orders:   orders,
		Timeout:  timeout,
		Root:     root,
		Logs:     logs,
		Progress: os.Stderr,
	}
	if profile != "" {
		abs, err := filepath.Abs(profile)
		if err != nil {
			return err
		}
		cfg.ExtraArgs = func(impl, order string) []string {
			if h, ok := hows[impl]; !ok || h != mainModule {
				return nil
			}
			return []string{"-cpuprofile", fmt.Sprintf("%s-%s-%s.pprof", abs, impl, order)}
		}
	}
	rows, err := Run(ctx, cfg)
	if len(rows) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%d records of %d bytes, %d partitions, %d keys; %d calls of %v in flight; Apache Kafka 4.1.0 on loopback; %s\n\n",
			records, cfg.Workload.ValueSize, cfg.Workload.Partitions, cfg.Workload.Keys, cfg.Inflight, cfg.Work, time.Now().UTC().Format(time.RFC3339))
		writeTable(&b, rows)
		fmt.Print(b.String())
		if out != "" {
			if werr := os.WriteFile(out, []byte(b.String()), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err == nil {
		err = notPassed(rows)
	}
	return err
}

// notPassed says which rows did not run to a passing check, if any: the
// command then fails, so that a script or CI sees it without reading the
// table.
func notPassed(rows []Row) error {
	var bad []string
	for _, r := range rows {
		if r.Status != "ok" || !r.Passed {
			bad = append(bad, fmt.Sprintf("%s %s (%s)", r.Impl, r.Order, r.Status))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d rows did not pass their check: %s", len(bad), len(rows), strings.Join(bad, ", "))
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// TestWorkerProcessesSurviveSIGKILL runs the scheduler and the supervisor
// as the sluice binary, in processes of their own, against a broker, a real
// redis-server and HTTP services that fail now and then — with a drone
// service that is not idempotent (mode b: every call books a drone). While
// the load generator sends, each worker is killed with SIGKILL twice and
// started again. Afterwards every request must have an outcome, no side
// effect may exist twice (no drone booked twice), and every compensation
// must have left nothing behind.
func TestWorkerProcessesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILLs and restarts worker processes: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "delivery-requests"),
		kfake.SeedTopics(4, "delivery-failures"), kfake.SeedTopics(1, "delivery-dead-letters"),
		kfake.SeedTopics(4, "delivery-failures-retry"), kfake.SeedTopics(1, "delivery-compensation-dead-letters"),
		kfake.SeedTopics(4, "delivery-requests-retry"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	killWorkers(t, kafkaTopics(t, c.ListenAddrs()))
}

// topicsAt is where killWorkers' processes find the topics.
type topicsAt struct {
	// args are the flags of the n-th incarnation (from 1) of the worker
	// which that say where its topics are (and, for the scheduler, its
	// step records).
	args func(which string, n int) []string
	// producer writes the load; verify reads the topics back for the
	// verification (with brokers, on Kafka).
	producer kafkasink.Producer
	brokers  []string
	verify   []demo.VerifyOption
}

// kafkaTopics are the topics on brokers that hold the five topics (the
// scheduler's three, the supervisor's retry and dead-letter topics), the
// scheduler's step records in a redis-server of their own.
func kafkaTopics(t *testing.T, brokers []string) topicsAt {
	redisAddr := testenv.Redis(t)
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return topicsAt{producer: producer, brokers: brokers, args: func(which string, _ int) []string {
		args := []string{"-brokers", strings.Join(brokers, ","), "-session-timeout", "1s"}
		if which == "delivery" {
			args = append(args, "-redis", redisAddr)
		}
		return args
	}}
}

// killWorkers is TestWorkerProcessesSurviveSIGKILL with the topics at.
func killWorkers(t *testing.T, at topicsAt) {
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building sluice: %v\n%s", err, out)
	}

	// The services live in this process, so that their ledger can be
	// checked whatever happens to the workers.
	ledger := delivery.NewLedger()
	sim := delivery.SimConfig{MinLatency: time.Millisecond, MaxLatency: 5 * time.Millisecond,
		TransientRate: 0.05, ThrottleRate: 0.01, RetryAfter: 20 * time.Millisecond}
	srv := httptest.NewServer(delivery.HTTPHandler(delivery.SimulatedNonIdempotent(sim, ledger, loadgen.SuspendedOwner)))
	defer srv.Close()

	logs := t.TempDir()
	incarnation := map[string]int{}
	start := func(which string) *exec.Cmd {
		incarnation[which]++
		log, err := os.Create(filepath.Join(logs, fmt.Sprintf("%s-%d.log", which, incarnation[which])))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		args := append([]string{"run", which, "-backends", srv.URL, "-listen", "127.0.0.1:0", "-replay-after", "200ms",
			"-max-replay-delay", "2s"}, at.args(which, incarnation[which])...)
		if which == "delivery" {
			args = append(args, "-parallelism", "128", "-stale-after", "4s")
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	workers := map[string]*exec.Cmd{"delivery": start("delivery"), "supervisor": start("supervisor")}
	defer func() {
		for _, cmd := range workers {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				kill(cmd)
			}
		}
		if t.Failed() {
			entries, _ := os.ReadDir(logs)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(logs, e.Name()))
				t.Logf("--- %s (last 2 KB)\n%s", e.Name(), testenv.Tail(b, 2048))
			}
		}
	}()

	const load = 8 * time.Second
	sent := loadgen.NewSent()
	cfg := loadgen.Default("delivery-requests", 1500, load)
	cfg.Undeliverable = 0.02 // compensations to crash in the middle of
	loadDone := make(chan error, 1)
	go func() { loadDone <- loadgen.Run(context.Background(), at.producer, cfg, sent) }()

	// Kill each worker twice while the load runs, alternating, once it has
	// done some work, and start a new one in its place.
	for i, which := range []string{"delivery", "supervisor", "delivery", "supervisor"} {
		time.Sleep(load / 5)
		before := ledger.LiveCount("deliveries")
		kill(workers[which])
		workers[which] = start(which)
		t.Logf("killed the %s worker at %v (deliveries so far %d)", which, time.Duration(i+1)*load/5, before)
	}
	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !demo.Accounted(sent, ledger, -1, at.brokers, at.verify...) {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	sum, err := demo.Verify(sent, ledger, at.brokers, at.verify...)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if !sum.OK() {
		t.Fatalf("after SIGKILLs: %s", sum)
	}
	if sum.Completed == 0 || sum.Compensated == 0 {
		t.Fatalf("the run proves little: %s", sum)
	}
}

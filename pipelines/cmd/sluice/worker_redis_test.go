package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	sinkredis "github.com/sluice-streams/sluice/sink/redisstream"
)

// -transport redis without -redis has nowhere to read from: each worker
// says so before it connects to anything.
func TestWorkerOnRedisNeedsRedis(t *testing.T) {
	for _, which := range []string{"delivery", "supervisor"} {
		err := runWorker(context.Background(), []string{which, "-transport", "redis", "-brokers", "127.0.0.1:1"})
		if err == nil || !strings.Contains(err.Error(), "-transport redis: -redis is needed") || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("run %s -transport redis without -redis: %v, want the missing -redis named before connecting", which, err)
		}
	}
}

// A worker on Redis whose server does not answer stops at once, naming the
// server: it reads and writes nothing.
func TestWorkerOnRedisNamesAnUnreachableServer(t *testing.T) {
	for _, which := range []string{"delivery", "supervisor"} {
		err := runWorker(context.Background(), []string{which, "-transport", "redis", "-redis", "redis://127.0.0.1:1/2",
			"-listen", "127.0.0.1:0"})
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1 db 2") {
			t.Errorf("run %s on an unreachable Redis: %v, want an error naming it", which, err)
		}
	}
}

// workersReads are the streams the workers read by default, each with its
// group; requests are the scheduler's input, replaced by the level
// streams with -level-topics.
var (
	requests     = groupRead{"delivery-requests", "sluice-delivery"}
	workersReads = []groupRead{{"delivery-requests-retry", "sluice-delivery-replay"}, {"delivery-failures", "sluice-supervisor"},
		{"delivery-failures-retry", "sluice-supervisor-replay"}}
)

// streamsPending is how many entries the groups have read and not
// acknowledged, over every stream of reads.
func streamsPending(ctx context.Context, rc *redis.Client, reads []groupRead) (int64, error) {
	var n int64
	for _, r := range reads {
		groups, err := rc.XInfoGroups(ctx, r.stream).Result()
		if err != nil {
			if strings.Contains(err.Error(), "no such key") {
				continue
			}
			return 0, err
		}
		for _, g := range groups {
			if g.Name == r.group {
				n += g.Pending
			}
		}
	}
	return n, nil
}

// stageCount reads a stage's count, metric (sluice_stage_received_total,
// sluice_stage_emitted_total), from a worker's metrics.
func stageCount(t *testing.T, addr, metric, pipeline, stage string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(fmt.Sprintf(`%s\{pipeline="%s",stage="%s"\} (\d+)`, metric, pipeline, stage))
	m := re.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestWorkersOnRedisStreams runs both workers in this process on the
// streams of a real redis-server (-transport redis), against HTTP
// services that fail now and then and whose drone service answers 503 to
// every call for 1.5 s mid-load: the requests and compensations that meet
// it are parked and replayed. Every request must end in exactly one
// outcome, nothing twice, and every stream entry read must be
// acknowledged at the end. The requests come on one stream, or on a
// stream per level of priority (-level-topics: a group each).
func TestWorkersOnRedisStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("runs both workers on Redis streams through a load: make test runs it, -short does not")
	}
	t.Run("one stream", func(t *testing.T) { workersOnRedisStreams(t, nil) })
	t.Run("level streams", func(t *testing.T) {
		workersOnRedisStreams(t, []string{"delivery-requests-high", "delivery-requests-normal", "delivery-requests-low"})
	})
}

func workersOnRedisStreams(t *testing.T, levels []string) {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ledger := delivery.NewLedger()
	sim := delivery.SimConfig{MinLatency: time.Millisecond, MaxLatency: 5 * time.Millisecond,
		TransientRate: 0.05, ThrottleRate: 0.01, RetryAfter: 20 * time.Millisecond}
	faults := delivery.NewFaultSet(nil)
	srv := httptest.NewServer(faults.Inject(delivery.HTTPHandler(delivery.SimulatedNonIdempotent(sim, ledger, loadgen.SuspendedOwner))))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 2)
	onListen = func(which, a string) { addrs <- which + " " + a }
	defer func() { onListen = nil }()
	done := make(chan error, 2)
	common := []string{"-transport", "redis", "-redis", addr, "-backends", srv.URL, "-listen", "127.0.0.1:0",
		"-replay-after", "200ms", "-max-replay-delay", "1s", "-summary-every", "0"}
	scheduler := []string{"delivery", "-parallelism", "64", "-stale-after", "4s"}
	reads := append([]groupRead{requests}, workersReads...)
	if levels != nil {
		scheduler = append(scheduler, "-level-topics", strings.Join(levels, ","))
		reads = workersReads
		for _, l := range []string{"high", "normal", "low"} {
			reads = append(reads, groupRead{"delivery-requests-" + l, "sluice-delivery-" + l})
		}
	}
	go func() { done <- runWorker(ctx, append(scheduler, common...)) }()
	go func() { done <- runWorker(ctx, append([]string{"supervisor"}, common...)) }()
	listening := map[string]string{}
	for len(listening) < 2 {
		select {
		case a := <-addrs:
			which, at, _ := strings.Cut(a, " ")
			listening[which] = at
		case err := <-done:
			t.Fatalf("a worker ended at its start: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the workers did not start within 30 s")
		}
	}

	if _, err := faults.Add(delivery.Fault{Service: "drones", Status: http.StatusServiceUnavailable, After: time.Second,
		For: 1500 * time.Millisecond}, time.Now()); err != nil {
		t.Fatal(err)
	}
	producer := sinkredis.NewProducer(rc)
	defer producer.Close()
	sent := loadgen.NewSent()
	cfg := loadgen.Default("delivery-requests", 500, 3*time.Second)
	cfg.Undeliverable = 0.02
	cfg.Topics = levels
	if err := loadgen.Run(ctx, producer, cfg, sent); err != nil {
		t.Fatal(err)
	}
	read := demo.ReadFrom(demo.RedisReader(rc))
	for deadline := time.Now().Add(90 * time.Second); !demo.Accounted(sent, ledger, -1, nil, read) && time.Now().Before(deadline); {
		select {
		case err := <-done:
			t.Fatalf("a worker ended: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	sum, err := demo.Verify(sent, ledger, nil, read)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if !sum.OK() || sum.Lost != 0 || sum.Twice != 0 || sum.TwoOutcomes != 0 || sum.Completed == 0 || sum.Compensated == 0 {
		t.Fatalf("on Redis streams: %s", sum)
	}
	parked := stageCount(t, listening["delivery"], "sluice_stage_received_total", "delivery", "park")
	replayed := stageCount(t, listening["delivery"], "sluice_stage_emitted_total", "delivery", "replays")
	t.Logf("requests parked %d, replays read %d", parked, replayed)
	if parked == 0 || replayed < parked {
		t.Errorf("requests parked %d, replays read %d: want some parked while the drones failed, each read back", parked, replayed)
	}
	// Everything read is acknowledged once settled (within the
	// checkpoints' interval): nothing stays pending.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := streamsPending(ctx, rc, reads)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending 10 s after every request had its outcome: %d (%v)", n, err)
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a worker stopping: %v", err)
		}
	}
}

// redisTopics are the topics on the streams of a redis-server, which
// also keeps the scheduler's step records. A worker restarted after a
// SIGKILL comes back under its name the first time (it reads its pending
// entries again) and under a new one the second (the others take the dead
// one's entries over once idle for -reclaim-after).
func redisTopics(t *testing.T) topicsAt {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	producer := sinkredis.NewProducer(rc)
	t.Cleanup(producer.Close)
	return topicsAt{producer: producer, verify: []demo.VerifyOption{demo.ReadFrom(demo.RedisReader(rc))},
		args: func(which string, n int) []string {
			return []string{"-transport", "redis", "-redis", addr, "-reclaim-after", "2s",
				"-consumer", fmt.Sprintf("%s-%d", which, (n+1)/2)}
		}}
}

// TestWorkerProcessesOnRedisSurviveSIGKILL is
// TestWorkerProcessesSurviveSIGKILL with the topics on Redis streams.
func TestWorkerProcessesOnRedisSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILLs and restarts worker processes on Redis streams: make test runs it, -short does not")
	}
	killWorkers(t, redisTopics(t))
}

// `sluice demo -transport redis` runs the whole system on the streams of
// an embedded Redis and verifies it: PASS. With -redis a URL, it runs on
// that server, with its password and database.
func TestDemoOnRedisStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for seconds: make test runs it, -short does not")
	}
	t.Run("embedded", func(t *testing.T) { demoOnRedis(t, "on Redis streams", "embedded Redis (miniredis)") })
	t.Run("a server with a password", func(t *testing.T) {
		srv := testenv.StartRedisWith(t, testenv.RedisAuth{Password: "s3cret"})
		demoOnRedis(t, "on Redis streams", "transport: Redis streams on "+srv.Addr, "-redis", "redis://:s3cret@"+srv.Addr+"/2")
	})
}

// demoOnRedis runs sluice demo -transport redis briefly with args and
// wants a PASS and each of want in what it prints.
func demoOnRedis(t *testing.T, want1, want2 string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args = append([]string{"demo", "-transport", "redis", "-duration", "2s", "-rate", "300", "-burst", "0", "-listen", ""}, args...)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GO_TEST_BE_SLUICE=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("sluice %s:\n%s", strings.Join(args, " "), out.String())
	for _, w := range []string{"verification PASS", want1, want2} {
		if err != nil || !strings.Contains(out.String(), w) {
			t.Fatalf("sluice demo -transport redis: %v, want a PASS and %q", err, w)
		}
	}
}

// Two workers started under one -consumer name share their pending
// entries: the second says so in its log. One started under the name of a
// worker that stopped (or was killed) does not.
func TestWorkerOnRedisWarnsOfItsNameInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three workers, each watching its name for 1.5 s: make test runs it, -short does not")
	}
	restoreLogging(t)
	var log testenv.Buffer
	logOutput = &log
	defer func() { logOutput = os.Stderr }()
	addr := testenv.Redis(t)
	listening := make(chan string, 3)
	onListen = func(_, a string) { listening <- a }
	defer func() { onListen = nil }()
	const warning = "another worker seems to run under this worker's consumer name"
	start := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- runWorker(ctx, []string{"supervisor", "-transport", "redis", "-redis", addr, "-consumer", "worker-1",
				"-listen", "127.0.0.1:0", "-summary-every", "0"})
		}()
		select {
		case <-listening:
		case err := <-done:
			t.Fatalf("a worker ended at its start: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("a worker did not start within 30 s")
		}
		return done
	}
	// Entries keep coming (malformed events, dead-lettered): a worker
	// that reads them is seen reading (Redis counts a consumer's idle time
	// from its last read that got entries).
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	feed, stopFeed := context.WithCancel(context.Background())
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for feed.Err() == nil {
			rc.XAdd(feed, &redis.XAddArgs{Stream: "delivery-failures", Values: []any{"value", "not an event"}})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopFeed(); <-fed }()
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := start(ctx1)
	if strings.Contains(log.String(), warning) {
		t.Fatalf("the first worker of its name warned:\n%s", log.String())
	}
	// The first reads: its name is in the group.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cs, _ := rc.XInfoConsumers(context.Background(), "delivery-failures", "sluice-supervisor").Result()
		if len(cs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first worker did not read within 10 s:\n%s", log.String())
		}
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := start(ctx2)
	if n := strings.Count(log.String(), warning); n == 0 {
		t.Fatalf("a second worker of the same name, the first running, did not warn:\n%s", log.String())
	}
	stop1()
	stop2()
	for _, done := range []<-chan error{done1, done2} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	warned := strings.Count(log.String(), warning)
	ctx3, stop3 := context.WithCancel(context.Background())
	done3 := start(ctx3)
	stop3()
	if err := <-done3; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), warning); n != warned {
		t.Fatalf("a worker started under the name of stopped ones warned:\n%s", log.String())
	}
}

package ownership_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

const (
	ownedWorkerEnv = "SLUICE_OWNED_WORKER"
	procInterval   = 300 * time.Millisecond
	procExpiration = 1200 * time.Millisecond
	procParts      = 8
	procRecords    = 40_000
)

// ownedWorker is a worker process: Assigned source -> balancer (the
// ownership records and checkpoints in Redis database 0) -> MapAsync whose
// side effect adds the record's id to a set in Redis database 1 -> checkpoint
// sink. Every checkpoint accepted is also written to database 1 as
// audit:<partition>:<epoch> -> members, so the test can tell whether two
// members ever had checkpoints accepted under one epoch. It runs until it
// is killed, or until SIGTERM (then it drains, closes and relinquishes).
func ownedWorker() int {
	id := os.Getenv("SLUICE_ID")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	addr := os.Getenv("SLUICE_REDIS")
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: 0})
	side := redis.NewClient(&redis.Options{Addr: addr, DB: 1})
	src, err := kafka.NewAssigned(ctx, kafka.AssignedConfig{Conn: kafka.Conn{Brokers: strings.Split(os.Getenv("SLUICE_BROKERS"), ",")},
		Topic: os.Getenv("SLUICE_TOPIC"), Logger: log, MaxUnsettledPerPartition: 200})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "proc", Stream: os.Getenv("SLUICE_TOPIC"), Group: "g", Expiration: procExpiration})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bal, err := ownership.NewBalancer[[]byte](store, src, ownership.Config{ID: id, Interval: procInterval, Logger: log,
		OnCheckpoint: func(w ownership.Write, o ownership.Outcome) {
			if o == ownership.Accepted {
				side.SAdd(context.Background(), fmt.Sprintf("audit:%d:%d", w.Partition, w.Epoch), id)
			}
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	g := stream.New(stream.WithLogger(log))
	s := stream.Via(stream.From(g, stream.Source[[]byte](bal)), flow.MapAsync(16,
		func(ctx context.Context, v []byte) ([]byte, error) {
			time.Sleep(2 * time.Millisecond) // the service's latency
			return v, side.SAdd(ctx, "done", v).Err()
		}))
	stream.To(s, checkpoint.New[[]byte](bal, checkpoint.Interval(50*time.Millisecond)))
	runErr := g.Run(ctx)
	closeErr := bal.Close(context.Background())
	src.Close()
	if runErr != nil || closeErr != nil {
		fmt.Fprintln(os.Stderr, "worker:", runErr, closeErr)
		return 1
	}
	return 0
}

// worker is a running worker process and its stderr.
type worker struct {
	cmd *exec.Cmd
	out testenv.Buffer
}

func (w *worker) log() string { return w.out.String() }

// Worker processes share a topic's partitions through Redis while one is
// SIGKILLed, one is SIGSTOPped for longer than the expiration and then
// resumed, Redis loses every ownership record and checkpoint (FLUSHDB),
// and a new one joins: every record reaches the side effect, the paused
// one stops its partitions when it resumes, the lost checkpoints are reported,
// and no two members ever have a checkpoint accepted under one epoch.
func TestOwnedWorkerProcessesAcrossKillPauseAndDataLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("kills, pauses and restarts worker processes: make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, procParts, "in")
	testenv.Produce(t, brokers, "in", procRecords, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	ends := testenv.EndOffsets(t, brokers, "in")
	addr := testenv.Redis(t)
	side := redis.NewClient(&redis.Options{Addr: addr, DB: 1})
	defer side.Close()
	own := redis.NewClient(&redis.Options{Addr: addr, DB: 0})
	defer own.Close()
	observer, err := redisstore.New(redisstore.Config{Client: own, Namespace: "proc", Stream: "in", Group: "g", Expiration: procExpiration})
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string) *worker {
		w := &worker{}
		w.cmd = exec.Command(os.Args[0], "-test.run=^$")
		w.cmd.Env = append(os.Environ(), ownedWorkerEnv+"=1", "SLUICE_ID="+id, "SLUICE_BROKERS="+strings.Join(brokers, ","),
			"SLUICE_REDIS="+addr, "SLUICE_TOPIC=in")
		w.cmd.Stderr = &w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
		return w
	}
	done := func() int64 { return side.SCard(context.Background(), "done").Val() }
	waitDone := func(what string, atLeast int64) {
		deadline := time.Now().Add(30 * time.Second)
		for done() < atLeast {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d records done, want at least %d", what, done(), atLeast)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w1, w2, w3 := start("w1"), start("w2"), start("w3")
	waitDone("three workers started", procRecords/10)
	_ = w1.cmd.Process.Signal(syscall.SIGKILL)
	_ = w1.cmd.Wait()
	_ = w2.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2 * procExpiration) // w3 takes over w1's and w2's partitions meanwhile
	_ = w2.cmd.Process.Signal(syscall.SIGCONT)
	waitDone("after the kill and the pause", procRecords/3)
	if err := own.FlushDB(context.Background()).Err(); err != nil { // Redis loses the records and checkpoints
		t.Fatal(err)
	}
	w4 := start("w4")

	all := make([]int32, procParts)
	for i := range all {
		all[i] = int32(i)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		cks, err := observer.Checkpoints(context.Background(), all)
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		for _, ck := range cks {
			if ck.Offset == ends[ck.Partition] {
				at++
			}
		}
		if at == procParts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints %+v did not reach the log ends %v", cks, ends)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, w := range []*worker{w2, w3, w4} {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, w := range []*worker{w2, w3, w4} {
		if err := w.cmd.Wait(); err != nil {
			t.Errorf("worker %d exited with %v:\n%s", i+2, err, w.log())
		}
	}

	ids := side.SMembersMap(context.Background(), "done").Val()
	missing := 0
	for i := range procRecords {
		if _, ok := ids[strconv.Itoa(i)]; !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d records never reached the side effect", missing)
	}
	// Resumed, w2 stops every partition it held at once: by its deadline
	// (the fence timer, or the check before emitting a poll) or by its
	// first renewal, refused — whichever runs first after SIGCONT.
	if l := w2.log(); !strings.Contains(l, "SELF-FENCED") && !strings.Contains(l, "reason=renewal_refused") {
		t.Errorf("w2, resumed after a pause longer than the expiration, did not stop its partitions:\n%s", l)
	}
	lost := strings.Contains(w2.log()+w3.log(), "CHECKPOINT LOST")
	if !lost {
		t.Errorf("nobody reported the checkpoints Redis lost:\nw2: %s\nw3: %s", w2.log(), w3.log())
	}
	keys := side.Keys(context.Background(), "audit:*").Val()
	for _, k := range keys {
		if ms := side.SMembers(context.Background(), k).Val(); len(ms) > 1 {
			t.Errorf("%s: checkpoints accepted from %v under one epoch", k, ms)
		}
	}
	t.Logf("%d records in %d partitions; %d (partition, epoch) pairs with accepted checkpoints, each from one member", procRecords, procParts, len(keys))
}

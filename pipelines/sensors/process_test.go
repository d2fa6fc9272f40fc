package sensors_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// The test binary, run with workerEnv=1, is a worker process (TestMain).
const (
	workerEnv         = "SLUICE_SENSORS_WORKER"
	workerBrokersEnv  = "SLUICE_SENSORS_BROKERS"
	workerRedisEnv    = "SLUICE_SENSORS_REDIS"
	workerIDEnv       = "SLUICE_SENSORS_ID"
	workerTopicEnv    = "SLUICE_SENSORS_TOPIC"
	workerDeadLetters = "SLUICE_SENSORS_DEAD_LETTERS"
)

// workerProcess is one sensors worker, configured as testConfig's and
// from the environment: it runs until it is killed, or until SIGTERM
// (then Run writes the final checkpoints and relinquishes its partitions,
// and the process exits 0). It logs warnings and, at the end, its
// counters to stderr.
func workerProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(workerRedisEnv)})
	defer rdb.Close()
	id := os.Getenv(workerIDEnv)
	cfg := testConfig(strings.Split(os.Getenv(workerBrokersEnv), ","), rdb, id)
	cfg.Topic, cfg.DeadLetterTopic = os.Getenv(workerTopicEnv), os.Getenv(workerDeadLetters)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := sensors.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	err = w.Run(ctx)
	fmt.Fprintf(os.Stderr, "%s stats: %+v\n", id, w.Stats())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// workerProc is a running worker process and its stderr.
type workerProc struct {
	id  string
	cmd *exec.Cmd
	out testenv.Buffer
}

// startWorker starts the test binary as a worker of topic (its dead
// letters to deadLetters) on brokers and the Redis at addr.
func startWorker(t *testing.T, brokers []string, topic, deadLetters, addr, id string) *workerProc {
	t.Helper()
	w := &workerProc{id: id}
	w.cmd = exec.Command(os.Args[0], "-test.run=^$")
	w.cmd.Env = append(os.Environ(), workerEnv+"=1", workerIDEnv+"="+id, workerBrokersEnv+"="+strings.Join(brokers, ","),
		workerRedisEnv+"="+addr, workerTopicEnv+"="+topic, workerDeadLetters+"="+deadLetters)
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	return w
}

// terminate sends SIGTERM and waits for the worker to exit 0.
func (w *workerProc) terminate(t *testing.T) {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM:\n%s", w.id, err, w.out.String())
		}
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
		t.Errorf("%s did not exit within 30 s of SIGTERM:\n%s", w.id, w.out.String())
	}
}

// lastLine is the last line the worker wrote (its counters, once it ended).
func (w *workerProc) lastLine() string {
	lines := strings.Split(strings.TrimSpace(w.out.String()), "\n")
	return lines[len(lines)-1]
}

// Three worker processes share 16 partitions while readings flow; one is
// SIGKILLed (no final checkpoint, no relinquish: its partitions are taken
// over when its leases expire) and a fourth joins. Every home's every
// minute in Redis equals the recount of what was sent, and the malformed
// and late readings are on the dead-letter topic.
func TestSensorsWorkerProcessesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes, one SIGKILLed and its leases waited out (tens of seconds): make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 16, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	workersSurviveSIGKILL(t, brokers, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
}

// workersSurviveSIGKILL is the test on brokers, where topic (16
// partitions) and deadLetters exist.
func workersSurviveSIGKILL(t *testing.T, brokers []string, topic, deadLetters string) {
	addr := testenv.Redis(t)
	rdb, store := testStore(t, addr)
	cfg := testConfig(brokers, rdb, "observer")
	observer, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: cfg.Namespace, Stream: topic,
		Group: sensors.DefaultGroup, Expiration: cfg.Expiration})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int32, 16)
	for i := range all {
		all[i] = int32(i)
	}
	gcfg := genConfig()
	gcfg.Topic = topic
	gcfg.AddKindAfter = 2 * time.Second
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	const minutes = 20 // 10 s of readings
	start := func(id string) *workerProc { return startWorker(t, brokers, topic, deadLetters, addr, id) }
	// waitFor polls the checkpoints and ownership records until ok.
	waitFor := func(what string, ok func([]ownership.Checkpoint, ownership.Table) bool) ([]ownership.Checkpoint, ownership.Table) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			cks, err := observer.Checkpoints(context.Background(), all)
			if err != nil {
				t.Fatal(err)
			}
			tb, err := observer.Table(context.Background(), all)
			if err != nil {
				t.Fatal(err)
			}
			if ok(cks, tb) {
				return cks, tb
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s; checkpoints %+v, owners %+v", what, cks, tb.Owners)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	w1, w2, w3 := start("w1"), start("w2"), start("w3")
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, brokers, gen, minutes)
	}()

	// w2 is killed once it has checkpointed readings of a partition it
	// holds: it has windows open and writes in flight.
	waitFor("w2 checkpoints a partition it holds", func(cks []ownership.Checkpoint, tb ownership.Table) bool {
		for i, ck := range cks {
			if ck.Owner == "w2" && ck.Offset > 0 && tb.Owners[i].Owner == "w2" {
				return true
			}
		}
		return false
	})
	_ = w2.cmd.Process.Signal(syscall.SIGKILL)
	_ = w2.cmd.Wait()
	killedAt := gen.SimNow().Sub(gcfg.Start)
	select {
	case <-produced:
		t.Logf("the generator had finished before w2 was killed: no readings flowed during the takeover")
	default:
	}
	_, tb := waitFor("read the table", func([]ownership.Checkpoint, ownership.Table) bool { return true })
	var held []int32
	for _, o := range tb.Owners {
		if o.Owner == "w2" {
			held = append(held, o.Partition)
		}
	}
	if len(held) == 0 {
		t.Fatalf("w2 held no partition when it was killed: %+v", tb.Owners)
	}
	// Its leases expire and the others take its partitions over.
	waitFor("w2's partitions taken over", func(_ []ownership.Checkpoint, tb ownership.Table) bool {
		for _, o := range tb.Owners {
			if slices.Contains(held, o.Partition) && (o.Owner == "" || o.Owner == "w2") {
				return false
			}
		}
		return true
	})
	w4 := start("w4")
	<-produced
	if t.Failed() {
		t.FailNow() // produce failed
	}
	if gen.Kinds() != 4 {
		t.Fatalf("kinds %d: the fourth was not added", gen.Kinds())
	}
	live := []*workerProc{w1, w3, w4}
	waitAtLogEnd(t, brokers, topic, observer, 30*time.Second, func() string {
		var s string
		for _, w := range append(live, w2) {
			s += fmt.Sprintf("\n%s:\n%s", w.id, testenv.Tail([]byte(w.out.String()), 3000))
		}
		return s
	})
	for _, w := range live {
		w.terminate(t)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, w := range live {
		t.Logf("%s", w.lastLine())
	}
	t.Logf("w2 killed holding partitions %v, %v of the %d simulated minutes sent", held, killedAt, minutes)
	verifyTopic(t, brokers, deadLetters, store, gen)
}

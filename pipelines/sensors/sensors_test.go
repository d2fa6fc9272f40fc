package sensors_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" { // a worker process of process_test.go
		os.Exit(workerProcess())
	}
	// With the kafka build tag, against a real broker.
	os.Exit(testenv.RunTests(m, func(m *testing.M) int {
		goleak.VerifyTestMain(m)
		return 0
	}))
}

var quiet = slog.New(slog.DiscardHandler)

// instance is one worker run in this process.
type instance struct {
	w    *sensors.Worker
	stop context.CancelFunc
	done chan error
}

func startInstance(t *testing.T, cfg sensors.Config) *instance {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	w, err := sensors.New(ctx, cfg)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	in := &instance{w: w, stop: stop, done: make(chan error, 1)}
	go func() { in.done <- w.Run(ctx) }()
	return in
}

func (in *instance) close(t *testing.T) {
	t.Helper()
	in.stop()
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop within 30 s")
	}
}

// testStore connects to the redis-server at addr (closed at the test's
// end) and returns the client and the aggregates' store of namespace
// "test".
func testStore(t *testing.T, addr string) (*redis.Client, *sensors.Store) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	store, err := sensors.NewStore(rdb, "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return rdb, store
}

// testConfig is a worker's configuration for a compressed run: a
// simulated minute passes in half a second, so the lateness (30 s of
// event time) is a quarter of a second, and partitions idle for a second
// have their minutes written.
func testConfig(brokers []string, rdb redis.UniversalClient, id string) sensors.Config {
	return sensors.Config{Conn: kafka.Conn{Brokers: brokers}, Redis: rdb, InstanceID: id, Namespace: "test",
		Interval: 300 * time.Millisecond, Expiration: 1800 * time.Millisecond, IdleClose: time.Second, Logger: quiet}
}

func genConfig() sensors.GenConfig {
	return sensors.GenConfig{Homes: 2000, Kinds: 3, Compression: 120, Malformed: 0.004, Late: 0.004, OutOfRange: 0.002,
		Start: time.Now().Add(-2 * time.Hour).Truncate(time.Minute)}
}

// waitCheckpointed waits until every partition's checkpoint is at the end
// of its log.
func waitCheckpointed(t *testing.T, brokers []string, w *sensors.Worker, limit time.Duration) {
	t.Helper()
	waitAtLogEnd(t, brokers, sensors.DefaultTopic, w.Owners(), limit, func() string { return fmt.Sprintf("stats %+v", w.Stats()) })
}

// waitAtLogEnd waits until the checkpoint of every partition of topic, as
// owners reads it, is at the end of its log; state describes the workers
// if they do not get there within limit.
func waitAtLogEnd(t *testing.T, brokers []string, topic string, owners *redisstore.Store, limit time.Duration, state func() string) {
	t.Helper()
	ends := testenv.EndOffsets(t, brokers, topic)
	ps := make([]int32, 0, len(ends))
	for p := range ends {
		ps = append(ps, p)
	}
	deadline := time.Now().Add(limit)
	behind := "not read"
	for time.Now().Before(deadline) {
		cks, err := owners.Checkpoints(context.Background(), ps)
		if err == nil {
			behind = ""
			for _, ck := range cks {
				if ck.Offset < ends[ck.Partition] {
					behind += fmt.Sprintf(" p%d:%d/%d", ck.Partition, ck.Offset, ends[ck.Partition])
				}
			}
			if behind == "" {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("checkpoints behind the log end after %v:%s; %s", limit, behind, state())
}

func verify(t *testing.T, brokers []string, store *sensors.Store, gen *sensors.Generator) {
	t.Helper()
	verifyTopic(t, brokers, sensors.DefaultDeadLetterTopic, store, gen)
}

// verifyTopic compares every (home, minute) aggregate in store and the
// dead letters on deadLetters with what gen sent.
func verifyTopic(t *testing.T, brokers []string, deadLetters string, store *sensors.Store, gen *sensors.Generator) {
	t.Helper()
	rep, err := gen.Expected.Verify(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verification: %v", rep)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dl, err := sensors.ReadDeadLetters(ctx, cl, deadLetters)
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.Expected.CheckDeadLetters(dl); err != nil {
		t.Fatalf("%v (reasons %v)", err, dl.Reasons)
	}
	valid, malformed, late, _, _ := gen.Expected.Counts()
	t.Logf("%v; %d valid readings, dead letters: %d malformed, %d late (%d records), reasons %v",
		rep, valid, malformed, late, dl.Records, dl.Reasons)
}

func produce(t *testing.T, brokers []string, gen *sensors.Generator, minutes int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := gen.Run(context.Background(), cl, minutes); err != nil {
		t.Fatal(err)
	}
}

// Three instances share 16 partitions; one stops and a fourth joins while
// readings flow; a new kind of sensor raises the rate. Every home's every
// minute in Redis equals the recount of what was sent, and the malformed
// and late readings are on the dead-letter topic.
func TestSensorsInstancesStopAndJoinWhileReadingsFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("instances stop and join while readings flow (tens of seconds): make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 16, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	rdb, store := testStore(t, testenv.Redis(t))
	gcfg := genConfig()
	gcfg.AddKindAfter = 2 * time.Second
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	var ins []*instance
	for i := range 3 {
		ins = append(ins, startInstance(t, testConfig(brokers, rdb, fmt.Sprintf("w%d", i+1))))
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, brokers, gen, 10) // 5 s
	}()
	time.Sleep(1500 * time.Millisecond)
	ins[1].close(t) // graceful: final checkpoints, partitions relinquished
	time.Sleep(1500 * time.Millisecond)
	ins = append(ins, startInstance(t, testConfig(brokers, rdb, "w4")))
	<-produced
	if gen.Kinds() != 4 {
		t.Fatalf("kinds %d: the fourth was not added", gen.Kinds())
	}
	waitCheckpointed(t, brokers, ins[0].w, 20*time.Second)
	for i, in := range ins {
		if i != 1 {
			in.close(t)
		}
	}
	verify(t, brokers, store, gen)
}

package ownership_test

import (
	"context"
	"fmt"
	"sync"
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

// instance is one member reading a Kafka topic through the Redis store:
// Assigned source -> MapAsync -> a recorder -> checkpoint sink.
type instance struct {
	id     string
	rdb    *redis.Client
	a      *kafka.Assigned
	b      *ownership.Balancer[[]byte]
	cancel context.CancelFunc
	done   chan error
}

type seenSet struct {
	mu   sync.Mutex
	recs map[[2]int64]int // (partition, offset) -> times processed
}

func (s *seenSet) add(p int32, off int64) {
	s.mu.Lock()
	s.recs[[2]int64{int64(p), off}]++
	s.mu.Unlock()
}

func startInstance(t *testing.T, brokers []string, topic, redisAddr, id string, seen *seenSet, a *audit, work time.Duration) *instance {
	t.Helper()
	in := &instance{id: id, rdb: redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1}), done: make(chan error, 1)}
	store, err := redisstore.New(redisstore.Config{Client: in.rdb, Namespace: "test", Stream: topic, Group: "g", Expiration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	in.a, err = kafka.NewAssigned(context.Background(), kafka.AssignedConfig{Conn: kafka.Conn{Brokers: brokers}, Topic: topic,
		Logger: quiet, MaxUnsettledPerPartition: 500})
	if err != nil {
		t.Fatal(err)
	}
	in.b, err = ownership.NewBalancer[[]byte](store, in.a, ownership.Config{ID: id, Interval: 400 * time.Millisecond, Logger: quiet,
		OnCheckpoint: a.record(id)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, stream.Source[[]byte](in.b)), flow.MapAsync(16, func(ctx context.Context, v []byte) ([]byte, error) {
		time.Sleep(work)
		return v, nil
	}))
	s = stream.Via(s, recorder(func(m *stream.Message[[]byte]) error { seen.add(m.Partition, m.Offset); return nil }))
	stream.To(s, checkpoint.New[[]byte](in.b, checkpoint.Interval(50*time.Millisecond)))
	go func() { in.done <- g.Run(ctx) }()
	return in
}

// recorder is a flow that calls each for every message, in order, before
// passing it on; an error from each ends the pipeline.
func recorder(each func(*stream.Message[[]byte]) error) stream.Flow[[]byte, []byte] {
	return stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				if err := each(&b.Items[i]); err != nil {
					return err
				}
				if err := out.Send(ctx, b.Items[i]); err != nil {
					return err
				}
			}
			b.Release()
		}
	})
}

// stop ends the pipeline and closes the balancer (a graceful stop).
func (in *instance) stop(t *testing.T) {
	t.Helper()
	in.cancel()
	<-in.done
	if err := in.b.Close(context.Background()); err != nil {
		t.Errorf("%s: Close: %v", in.id, err)
	}
	in.a.Close()
	in.rdb.Close()
}

// crash cuts the instance from Redis and Kafka at once, as a killed
// process: no final checkpoint, no relinquish; its leases expire.
func (in *instance) crash() {
	in.rdb.Close()
	in.a.Close()
	in.cancel()
	<-in.done
}

// Members join, leave gracefully and crash while they read a topic of 8
// partitions through the Redis store: every record is processed, the
// checkpoints end at the log ends and never move back, and no two members
// have checkpoints accepted under one epoch.
func TestOwnedKafkaAcrossJoinsLeavesAndCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("members join, leave and crash for seconds: make test runs it, -short does not")
	}
	ownedAcrossMembers(t, testenv.Kfake(t, 8, "in"), "in")
}

// ownedAcrossMembers is the test on brokers, whose topic has 8 partitions.
func ownedAcrossMembers(t *testing.T, brokers []string, topic string) {
	const parts, n = 8, 30_000
	testenv.Produce(t, brokers, topic, n, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	redisAddr := testenv.Redis(t)
	ends := testenv.EndOffsets(t, brokers, topic)
	seen := &seenSet{recs: map[[2]int64]int{}}
	var a audit

	// Checkpoints polled from Redis never move back.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	observer, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "test", Stream: topic, Group: "g", Expiration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int32, parts)
	for i := range all {
		all[i] = int32(i)
	}
	var backwards []string
	last := map[int32]int64{}
	for _, p := range all {
		last[p] = -1 // no checkpoint yet
	}
	pollCks := func() []ownership.Checkpoint {
		cks, err := observer.Checkpoints(context.Background(), all)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range cks {
			if ck.Offset < last[ck.Partition] {
				backwards = append(backwards, fmt.Sprintf("partition %d: %d after %d", ck.Partition, ck.Offset, last[ck.Partition]))
			}
			last[ck.Partition] = max(last[ck.Partition], ck.Offset)
		}
		return cks
	}
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(20 * time.Millisecond):
				pollCks()
			}
		}
	}()

	work := 3 * time.Millisecond
	m1 := startInstance(t, brokers, topic, redisAddr, "m1", seen, &a, work)
	m2 := startInstance(t, brokers, topic, redisAddr, "m2", seen, &a, work)
	time.Sleep(time.Second)
	m3 := startInstance(t, brokers, topic, redisAddr, "m3", seen, &a, work)
	time.Sleep(time.Second)
	m2.crash()
	time.Sleep(time.Second)
	m1.stop(t)
	m4 := startInstance(t, brokers, topic, redisAddr, "m4", seen, &a, work)

	deadline := time.Now().Add(60 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		done := true
		cks, err := observer.Checkpoints(context.Background(), all)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range cks {
			if ck.Offset != ends[ck.Partition] {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints %v did not reach the log ends %v", cks, ends)
		}
	}
	close(stopPoll)
	<-polled
	m3.stop(t)
	m4.stop(t)
	if err := m2.b.Close(context.Background()); err == nil {
		t.Log("the crashed member's Close succeeded against a closed client?")
	}

	missing := 0
	for p := range int32(parts) {
		for off := range ends[p] {
			if seen.recs[[2]int64{int64(p), off}] == 0 {
				missing++
			}
		}
	}
	again := 0
	for _, c := range seen.recs {
		again += c - 1
	}
	t.Logf("%d records, %d processed again (at least once: after the crash and the moves)", n, again)
	if missing > 0 {
		t.Fatalf("%d records never processed", missing)
	}
	if len(backwards) > 0 {
		t.Fatalf("checkpoints moved back: %v", backwards)
	}
	if len(a.bad) > 0 {
		t.Fatalf("two members' checkpoints accepted under one epoch: %v", a.bad)
	}
}

// Redis stopped three times for longer than the expiration while records
// flow: the self-fence runs from its timer and from the emit gate (the
// poll loop) concurrently with rounds and commits. No deadlock, no race,
// every record processed, the instance fenced itself each time, and no
// goroutine left (goleak in TestMain).
func TestOwnedSelfFencesUnderLoadAcrossRedisOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out Redis outages under load: make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 4, "load")
	rs := testenv.StartDurableRedis(t)
	var a audit
	seen := &seenSet{recs: map[[2]int64]int{}}
	in := startInstance(t, brokers, "load", rs.Addr, "x", seen, &a, 0)
	total := 0
	produceFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			testenv.Produce(t, brokers, "load", 200, func(i int) []byte { return []byte("v") })
			total += 200
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 3 {
		produceFor(1500 * time.Millisecond)
		rs.Stop()
		produceFor(2500 * time.Millisecond) // past the 1.5 s expiration: self-fence
		rs.Start()
	}
	ends := testenv.EndOffsets(t, brokers, "load")
	deadline := time.Now().Add(20 * time.Second)
	for {
		seen.mu.Lock()
		n := len(seen.recs)
		seen.mu.Unlock()
		if n == total || time.Now().After(deadline) {
			t.Logf("processed %d distinct of %d records; ends %v; fences %d", n, total, ends, in.b.Stats().SelfFences)
			if f := in.b.Stats().SelfFences; f < 3 {
				t.Errorf("%d self-fences over three outages longer than the expiration", f)
			}
			if n != total {
				t.Errorf("lost records: %d of %d", total-n, total)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { in.stop(t); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("stop hangs: deadlock")
	}
	if len(a.bad) > 0 {
		t.Fatal(a.bad)
	}
}

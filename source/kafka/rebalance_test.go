package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// rebalanceTest runs three members of one group that join and leave while
// they consume: every record is processed (0 lost) and, per partition,
// commits never go back, whichever member makes them.
func rebalanceTest(t *testing.T, brokers []string, topic string) {
	const n = 60_000
	testenv.Produce(t, brokers, topic, n, func(i int) []byte { return strconv.AppendInt(nil, int64(i), 10) })

	var mu sync.Mutex
	seen := map[string]int{}
	lastCommit := map[int32]int64{}
	var regressions []string
	onCommit := func(_ string, p int32, off int64) {
		mu.Lock()
		defer mu.Unlock()
		if off < lastCommit[p] {
			regressions = append(regressions, strconv.Itoa(int(p))+": "+strconv.FormatInt(lastCommit[p], 10)+" -> "+strconv.FormatInt(off, 10))
		}
		lastCommit[p] = off
	}
	type member struct {
		cancel context.CancelFunc
		done   chan error
		src    *kafka.Source
	}
	startMember := func() *member {
		src := newSource(t, brokers, "rebalance-"+topic, func(c *kafka.Config) {
			c.Topics = []string{topic}
			c.OnCommit = onCommit
			c.MaxUnsettledPerPartition = 200
			c.Opts = append(c.Opts, kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(200*time.Millisecond))
		})
		ctx, cancel := context.WithCancel(context.Background())
		g := stream.New(stream.WithLogger(quiet))
		s := stream.Via(stream.From(g, src), flow.MapAsync(8,
			func(_ context.Context, v []byte) ([]byte, error) {
				time.Sleep(50 * time.Microsecond) // slow enough that members overlap
				mu.Lock()
				seen[string(v)]++
				mu.Unlock()
				return v, nil
			}))
		stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond), checkpoint.Every(500)))
		m := &member{cancel: cancel, done: make(chan error, 1), src: src}
		go func() { m.done <- g.Run(ctx) }()
		return m
	}
	stopMember := func(m *member) {
		m.cancel()
		if err := <-m.done; err != nil {
			t.Errorf("member run: %v", err)
		}
		if err := m.src.Close(context.Background()); err != nil {
			t.Logf("member close: %v", err)
		}
	}
	progress := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	waitFor := func(k int) {
		deadline := time.Now().Add(60 * time.Second)
		for progress() < k && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	a := startMember()
	waitFor(n / 6)
	b := startMember()
	waitFor(n / 3)
	c := startMember()
	waitFor(n / 2)
	stopMember(a)
	waitFor(2 * n / 3)
	stopMember(b)
	waitFor(n)
	stopMember(c)

	mu.Lock()
	defer mu.Unlock()
	lost, dups := 0, 0
	for i := range n {
		switch k := seen[strconv.Itoa(i)]; {
		case k == 0:
			lost++
		case k > 1:
			dups += k - 1
		}
	}
	t.Logf("%d records, 3 members joining and leaving: lost %d, duplicates %d; commit regressions %v", n, lost, dups, regressions)
	if lost != 0 || len(regressions) != 0 {
		t.Fatalf("lost %d, commit regressions %v", lost, regressions)
	}
}

func TestRebalanceKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("members join and leave a group for seconds: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(crashParts, "in"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	rebalanceTest(t, brokers, "in")
}

// A poll result that Run holds while it waits for room downstream belongs
// to the assignment that polled it. Here the member holds a poll of two
// partitions, blocked on the first, while the group revokes both and hands
// them straight back (eager range balancer, forced rejoin); the records
// before that poll are still in flight. The held records of the second
// partition must not be tracked into its new assignment: franz-go
// refetches it from the committed offset, so tracking them would put the
// ring's head above records that no assignment settled, and the next
// commit would jump over them.
func TestHeldPollIsNotTrackedIntoTheNextAssignment(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "in")
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(p int32, from, to int) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Value: []byte(strconv.Itoa(i))})
		}
		if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	processed := [2]map[int64]bool{{}, {}}
	lowest := func(p int32) int64 {
		for o := int64(0); ; o++ {
			if !processed[p][o] {
				return o
			}
		}
	}
	var violations []string
	committed := [2]int64{}
	src := newSource(t, brokers, "held", func(c *kafka.Config) {
		c.Balancer = kgo.RangeBalancer()
		c.OnCommit = func(_ string, p int32, off int64) {
			mu.Lock()
			defer mu.Unlock()
			if low := lowest(p); off > low {
				violations = append(violations, fmt.Sprintf("partition %d committed at %d, offset %d never processed", p, off, low))
			}
			committed[p] = off
		}
	})
	// hold keeps both partitions' records 0-99 (in flight, as far as the
	// source knows) and stops at the first record of the second poll
	// (offset 100 of either partition) until the gate opens, so that the
	// source blocks in the middle of that poll; from then on it keeps
	// everything, until release.
	gate, blocked, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var heldCount atomic.Int64
	var passed atomic.Int64 // records of the second poll that reached hold
	hold := stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
		var held []stream.Message[[]byte]
		first := true
		for {
			var b *stream.Batch[[]byte]
			select {
			case got, ok := <-in.C():
				if !ok {
					return nil
				}
				in.Received(got)
				b = got
			case <-release:
				for _, m := range held {
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
				held, release = nil, nil
				if err := out.Flush(ctx); err != nil {
					return err
				}
				continue
			case <-ctx.Done():
				return nil
			}
			for _, m := range b.Items {
				switch {
				case first && m.Offset >= 100:
					first = false
					close(blocked)
					select {
					case <-gate:
					case <-ctx.Done():
						return nil
					}
				}
				if release != nil && (m.Offset < 100 || !first) {
					held = append(held, m)
					heldCount.Add(1)
					continue
				}
				passed.Add(1)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			b.Release()
			if err := out.Flush(ctx); err != nil {
				return err
			}
		}
	})
	g := stream.New(stream.WithLogger(quiet), stream.WithBatchSize(10), stream.WithCapacity(10))
	s := stream.Via(stream.From(g, src), hold)
	s = stream.Via(s, flow.Map(func(v []byte) ([]byte, error) { return v, nil }))
	s = stream.Via(s, stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			mu.Lock()
			for _, m := range b.Items {
				processed[m.Partition][m.Offset] = true
			}
			mu.Unlock()
			if err := out.SendBatch(ctx, b); err != nil {
				return err
			}
		}
	}))
	ck := checkpoint.New[[]byte](src, checkpoint.Interval(10*time.Millisecond), checkpoint.WithLogger(quiet))
	stream.To(s, ck)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	// The first records of both partitions, held downstream.
	produce(0, 0, 100)
	produce(1, 0, 100)
	waitUntil("the first records", func() bool { return heldCount.Load() == 200 })
	// The second poll must hold both partitions: stop fetching them, let
	// any fetch in flight return, write to both, then fetch both at once.
	both := map[string][]int32{"in": {0, 1}}
	src.Client().PauseFetchPartitions(both)
	time.Sleep(300 * time.Millisecond) // longer than the source's FetchMaxWait
	produce(0, 100, 200)
	produce(1, 100, 200)
	src.Client().ResumeFetchPartitions(both)
	<-blocked
	time.Sleep(200 * time.Millisecond)
	if n := src.Client().BufferedFetchRecords(); n != 0 || passed.Load() != 0 {
		t.Fatalf("setup: %d records still buffered in the client, %d of the second poll passed; the blocked poll must hold both partitions",
			n, passed.Load())
	}
	assigned := src.Stats().Assigned
	src.Client().ForceRebalance() // eager: revoke both, then assign both back
	waitUntil("the partitions to come back", func() bool { return src.Stats().Assigned > assigned })
	close(gate)
	// Whatever the source sends now is held; let the checkpoint commit
	// twice meanwhile.
	commits := ck.Stats().Commits
	waitUntil("two more commits", func() bool { return ck.Stats().Commits >= commits+2 })
	close(release)
	waitUntil("everything processed and committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lowest(0) >= 200 && lowest(1) >= 200 && committed[0] == 200 && committed[1] == 200
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("commits above records that were never processed: %v", violations)
	}
}

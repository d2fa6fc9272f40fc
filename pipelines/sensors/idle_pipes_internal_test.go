package sensors

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A window whose writes stall (Redis paused) for longer than IdleClose
// stops taking input; meanwhile the source sends on into the window's
// input pipe the next readings of partitions whose minutes are open, so
// Unsent reads 0 for them. When the writes resume, the window must take
// those readings in before it takes the partitions for idle: closing
// their minutes first dead-letters the readings, on time, as late.
func TestCaughtUpWaitsForRecordsInThePipeBeforeTheWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("stalls Redis for longer than the idle close (seconds): make test runs it, -short does not")
	}
	const quietParts = 6 // partitions 1..6; partition 0 fills the window's output
	brokers := testenv.Kfake(t, 1+quietParts, DefaultTopic)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	discard := slog.New(slog.DiscardHandler)
	w, err := New(context.Background(), Config{Conn: kafka.Conn{Brokers: brokers}, Redis: rdb, InstanceID: "w1",
		Namespace: "test", IdleClose: time.Second, MaxUnsettledPerPartition: 100_000, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer w.dl.Close()
	defer w.src.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	base := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	rec := func(p int32, at time.Duration) *kgo.Record {
		ts := base.Add(at)
		return &kgo.Record{Topic: DefaultTopic, Partition: p, Timestamp: ts, Value: strconv.AppendInt(nil, ts.UnixMilli(), 10)}
	}
	produce := func(rs ...*kgo.Record) {
		t.Helper()
		if err := prod.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sentAll := func(ps ...int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			u, err := w.src.Unsent(context.Background())
			done := err == nil
			for _, p := range ps {
				if n, ok := u[p]; !ok || n != 0 {
					done = false
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("partitions %v not sent within 10 s: %v, %v", ps, u, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	var late atomic.Int64
	var mu sync.Mutex
	counts := map[int32][]int{} // the Count of each window of the minute base, by partition
	emitted := map[int32][]time.Time{}
	release := make(chan struct{})
	g := stream.New(stream.WithLogger(discard))
	minutes := stream.Via(stream.From(g, w.src), flow.Tumbling(WindowSize,
		func(*stream.Message[[]byte]) string { return "home" },
		func(v *[]byte) time.Time { ms, _ := strconv.ParseInt(string(*v), 10, 64); return time.UnixMilli(ms) },
		func(n *int, _ *[]byte) { *n++ },
		flow.Lateness(30*time.Second), flow.IdleClose(time.Second), flow.IdleWhenHeld(w.caughtUp),
		flow.OnLate(func(*flow.LateError) { late.Add(1) })))
	// The writer: stalled until release, taking one minute at a time.
	stream.To(minutes, testenv.GatedSink(release, func(m *stream.Message[flow.Windows[string, int]]) {
		if ws := m.Value; ws.Start.Equal(base) {
			mu.Lock()
			counts[ws.Partition] = append(counts[ws.Partition], ws.Count)
			emitted[ws.Partition] = append(emitted[ws.Partition], ws.Emitted)
			mu.Unlock()
		}
	}), stream.Buffer(1))
	stream.To(g.Failures(), sink.Discard[stream.Failure]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	for p := range int32(1 + quietParts) {
		w.src.Start(p, 0)
	}

	// Each quiet partition opens the minute base with one reading, 45 ms
	// apart: partition 1 has been quiet for 0.99 s, partition 6 for
	// 0.765 s, when the window stops taking input. The window's ticker
	// then hands it, once it takes input again, the time of the first tick
	// it missed (up to a quarter of IdleClose after it stopped), so one of
	// them has been quiet for IdleClose at that tick whatever the ticker's
	// phase.
	var quiet []int32
	var first time.Time
	for p := int32(1); p <= quietParts; p++ {
		quiet = append(quiet, p)
		produce(rec(p, time.Second))
		sentAll(p)
		if p == 1 {
			first = time.Now()
		}
		time.Sleep(time.Until(first.Add(time.Duration(p) * 45 * time.Millisecond)))
	}
	time.Sleep(time.Until(first.Add(990 * time.Millisecond)))
	// Partition 0 closes two minutes: the writer, stalled, holds the
	// first in its pipe, and the window waits to hand on the second.
	stalled := time.Now()
	produce(rec(0, 0), rec(0, 3*time.Minute), rec(0, 6*time.Minute))
	sentAll(0)
	// The quiet partitions' second readings of the minute, on time, one
	// poll each, partition 1's last: they wait in the window's input.
	for i := len(quiet) - 1; i >= 0; i-- {
		produce(rec(quiet[i], 2*time.Second))
		sentAll(quiet[i])
	}
	time.Sleep(time.Until(stalled.Add(1500 * time.Millisecond)))
	close(release)
	time.Sleep(3 * time.Second) // the quiet partitions close idle, with or without their second readings

	mu.Lock()
	defer mu.Unlock()
	t.Logf("counts %v late %d", counts, late.Load())
	for p, ts := range emitted {
		for _, e := range ts {
			t.Logf("partition %d emitted %v after the stall began", p, e.Sub(stalled))
		}
	}
	for _, p := range quiet {
		if c := counts[p]; len(c) != 1 || c[0] != 2 {
			t.Errorf("partition %d: the minute was written as %v (counts of each write), want once with both readings", p, c)
		}
	}
	if n := late.Load(); n > 0 {
		t.Errorf("%d on-time readings dead-lettered as late: their minutes closed idle while they waited before the window", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

package sensors

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A partition whose records all came in its last fetch but wait in the
// source, behind a pipeline with no room (after a Redis stall every
// partition resumes with a backlog, and a window sees nothing of the last
// ones for a while), is not idle: closing its open minute then would
// dead-letter its on-time readings as late. It is idle once the source
// has sent every record the broker holds.
func TestCaughtUpWaitsForRecordsTheSourceHolds(t *testing.T) {
	brokers := testenv.Kfake(t, 1, DefaultTopic)
	testenv.Produce(t, brokers, DefaultTopic, 2000, func(i int) []byte { return fmt.Appendf(nil, "%d", i) })
	end := testenv.EndOffsets(t, brokers, DefaultTopic)[0]
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	w, err := New(context.Background(), Config{Conn: kafka.Conn{Brokers: brokers}, Redis: rdb, InstanceID: "w1",
		Namespace: "test", IdleClose: time.Second, MaxUnsettledPerPartition: 100_000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.dl.Close()
	defer w.src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	stream.To(stream.From(g, w.src), testenv.GatedSink[[]byte](release, nil), stream.Buffer(16))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	w.src.Start(0, 0)

	fetched := func() bool {
		for _, p := range w.src.Stats().Partitions {
			if p.Partition == 0 && int64(p.Unsettled) == end && p.Unread == 0 {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(20 * time.Second)
	for !fetched() {
		if time.Now().After(deadline) {
			t.Fatalf("partition 0 not fetched to its end within 20 s: %+v", w.src.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Asked more than once: the answer is not one cached from before.
	for range 3 {
		if w.caughtUp(DefaultTopic, 0, 0) {
			t.Fatalf("partition 0 taken for idle with about %d of its %d records held by the source", end-16, end)
		}
		time.Sleep(150 * time.Millisecond)
	}
	close(release)
	deadline = time.Now().Add(20 * time.Second)
	for !w.caughtUp(DefaultTopic, 0, 0) {
		if time.Now().After(deadline) {
			t.Fatalf("partition 0 not idle within 20 s of being sent to its end: %+v", w.src.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A partition paused for holding MaxUnsettledPerPartition readings while
// they are on their way to the window (behind other partitions' after a
// Redis stall, on a machine busy enough that the window sees none of them
// for longer than IdleClose) is not idle, however long ago a minute of it
// was written: closing its open minute would write it short and
// dead-letter those readings, on time, as late. It is idle only when the
// window holds every reading it has unsettled and those keep it paused
// (its open minutes hold more than the limit allows).
func TestCaughtUpWaitsForAPausedPartitionsReadingsOnTheirWay(t *testing.T) {
	const limit = 100
	brokers := testenv.Kfake(t, 1, DefaultTopic)
	testenv.Produce(t, brokers, DefaultTopic, 3*limit, func(i int) []byte { return fmt.Appendf(nil, "%d", i) })
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	w, err := New(context.Background(), Config{Conn: kafka.Conn{Brokers: brokers}, Redis: rdb, InstanceID: "w1",
		Namespace: "test", IdleClose: time.Second, MaxUnsettledPerPartition: limit, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.dl.Close()
	defer w.src.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The pipes before the window: they hold what the source sent until
	// release, so no reading reaches the window and none is settled.
	release := make(chan struct{})
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	stream.To(stream.From(g, w.src), testenv.GatedSink[[]byte](release, nil), stream.Buffer(4*limit))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	w.src.Start(0, 0)

	stats := func() kafka.PartitionStats {
		for _, p := range w.src.Stats().Partitions {
			if p.Partition == 0 {
				return p
			}
		}
		return kafka.PartitionStats{}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !stats().Paused {
		if time.Now().After(deadline) {
			t.Fatalf("partition 0 not paused within 20 s: %+v", w.src.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// No minute of it was ever written: its last write is long past.
	if w.caughtUp(DefaultTopic, 0, 0) {
		t.Fatalf("paused partition 0 taken for idle with its %d unsettled readings on their way to the window, none held",
			stats().Unsettled)
	}
	// Held by the window, the same readings keep the partition paused:
	// only the idle close frees it.
	for !w.caughtUp(DefaultTopic, 0, stats().Unsettled) {
		if time.Now().After(deadline) {
			t.Fatalf("paused partition 0 not idle with every unsettled reading held by the window: %+v", stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

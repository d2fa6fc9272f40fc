package kafka_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// runInto runs src into snk until the test ends, and returns a function
// that stops the pipeline and waits for it.
func runInto(t *testing.T, src *kafka.Source, snk stream.Sink[[]byte]) (stop func()) {
	t.Helper()
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), snk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		src.Close(context.Background())
	}
	t.Cleanup(stop)
	return stop
}

// A member that has never committed still has its records of the partition
// to commit: its lag is the high watermark minus where the group started,
// not 0, until a commit brings it down.
func TestLagCountsRecordsNeverCommitted(t *testing.T) {
	const n = 300
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "lag-never-committed")
	var seen atomic.Int64
	stop := runInto(t, src, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "every record read", func() bool {
		st := src.Stats()
		return seen.Load() == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	p := src.Stats().Partitions[0]
	if p.Committed != -1 || p.Lag != n {
		t.Fatalf("before any commit: committed %d, lag %d; want -1 and %d (every record read, none committed)", p.Committed, p.Lag, n)
	}
	if err := src.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := src.Stats().Partitions[0]; p.Committed != n || p.Lag != 0 {
		t.Fatalf("after the commit: committed %d, lag %d; want %d and 0", p.Committed, p.Lag, n)
	}

	// The next member of the group starts from that commit: its lag is the
	// records produced since, not the whole log.
	stop() // Close commits n again: nothing new
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(n + i)) })
	next := newSource(t, brokers, "lag-never-committed")
	seen.Store(0)
	runInto(t, next, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "the new records read", func() bool {
		st := next.Stats()
		return seen.Load() == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	if p := next.Stats().Partitions[0]; p.Committed != -1 || p.Lag != n {
		t.Fatalf("next member, before its first commit: committed %d, lag %d; want -1 and %d (the records after the group's commit)", p.Committed, p.Lag, n)
	}
}

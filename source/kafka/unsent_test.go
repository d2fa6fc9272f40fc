package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A partition fetched to its end whose records wait in the source for room
// downstream reads Unread 0 (the fetch brought everything) but is not read
// to its end: Unsent counts the records not yet sent, and reaches 0 once
// they are. A partition started at its end reports 0 before any record; a
// partition started at the configured start (here the end) is left out
// until its first.
func TestUnsentCountsRecordsTheSourceHolds(t *testing.T) {
	brokers := testenv.Kfake(t, 3, "in")
	testenv.Produce(t, brokers, "in", 3000, func(i int) []byte { return fmt.Appendf(nil, "%d", i) })
	ends := testenv.EndOffsets(t, brokers, "in")
	a := newAssigned(t, brokers, func(c *kafka.AssignedConfig) { c.Start = kafka.Latest })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, a), testenv.GatedSink[[]byte](release, nil), stream.Buffer(16))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	a.Start(0, 0)
	a.Start(1, ends[1])
	a.Start(2, -1)

	var unsent map[int32]int64
	waitFor(t, "partition 0 fetched to its end, its records held by the source", 20*time.Second, func() bool {
		for _, ps := range a.Stats().Partitions {
			if ps.Partition == 0 && int64(ps.Unsettled) == ends[0] && ps.Unread == 0 {
				var err error
				unsent, err = a.Unsent(ctx)
				return err == nil
			}
		}
		return false
	})
	if u := unsent[0]; u < ends[0]-64 {
		t.Errorf("partition 0: %d records sent downstream of %d at most, Unsent = %d; want at least %d", 64, ends[0], u, ends[0]-64)
	}
	if u, ok := unsent[1]; !ok || u != 0 {
		t.Errorf("partition 1, started at its end: Unsent = %d (reported %v), want 0", u, ok)
	}
	close(release)
	waitFor(t, "partitions 0 and 1 sent to their end", 20*time.Second, func() bool {
		var err error
		unsent, err = a.Unsent(ctx)
		return err == nil && unsent[0] == 0 && unsent[1] == 0
	})
	if u, ok := unsent[2]; ok {
		t.Errorf("partition 2, started at the configured start and sent nothing: Unsent = %d, want it left out", u)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

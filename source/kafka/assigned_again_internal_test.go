package kafka

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// The group source ends the assignment of a partition that franz-go
// assigns again without having revoked it, and resumes it as forget does
// (partition.flow: "franz-go keeps partitions paused across
// rebalances"). Found in review: it marked the old one revoked but left it
// paused; a partition paused at the broker because the old assignment held
// MaxUnsettledPerPartition unsettled records then stayed paused for good:
// the old assignment's settles are ignored (revoked), and the new
// assignment holds nothing, believes it is not paused, and never calls
// Resume. The partition was never fetched again by this member: wedged.
//
// The callback is called directly, as franz-go would call it in the case
// the branch was written for.
func TestPartitionAssignedAgainWithoutRevokeIsNotLeftPaused(t *testing.T) {
	c := clusterWithHundred(t)
	const limit = 10
	src, err := NewSource(context.Background(), Config{Conn: Conn{Brokers: c.ListenAddrs()}, Group: "again", Topics: []string{"in"},
		MaxUnsettledPerPartition: limit, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	// A sink that holds what it gets (a window, a slow writer).
	var mu sync.Mutex
	var held []stream.Message[[]byte]
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			mu.Lock()
			held = append(held, b.Items...)
			mu.Unlock()
			b.Release()
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	pausedAtBroker := func() bool { return slices.Contains(src.cl.PauseFetchPartitions(nil)["in"], 0) }
	for deadline := time.Now().Add(20 * time.Second); !pausedAtBroker(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the partition was not paused with its unsettled records at the limit")
		}
	}

	// franz-go assigns partition 0 again, not having revoked it.
	src.assigned(context.Background(), src.cl, map[string][]int32{"in": {0}})
	// Whatever the old assignment held is settled (or dropped: a window
	// drops what it holds of an ended assignment).
	mu.Lock()
	stream.SettleAll(held, stream.Completed)
	n := len(held)
	mu.Unlock()
	time.Sleep(200 * time.Millisecond)

	src.mu.Lock()
	now := src.parts[tpKey{"in", 0}]
	src.mu.Unlock()
	if pausedAtBroker() {
		t.Fatalf("partition in/0 stays paused at the broker after it was assigned again: the old assignment's %d records "+
			"were settled (ignored: revoked) and the new one holds %d unsettled records and believes it is not paused "+
			"(paused=%v), so nothing will ever resume it", n, now.unsettled(), now.paused.Load())
	}
}

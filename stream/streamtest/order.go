package streamtest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

// partitionKey names one partition: what a source keeps in order.
type partitionKey struct {
	topic     string
	partition int32
}

func keyOf(e *stream.Envelope) partitionKey { return partitionKey{e.Topic, e.Partition} }

// arrivals are the indexes of the messages that arrived, in arrival order,
// by partition.
type arrivals map[partitionKey][]int

// disorder describes the first place, in the partitions in a fixed order,
// where an index is not greater than the one that arrived before it in its
// partition (out of order, or twice), or returns "" if there is none.
func (a arrivals) disorder() string {
	keys := make([]partitionKey, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].partition < keys[j].partition
	})
	for _, k := range keys {
		if d := disorder(a[k]); d != "" {
			return fmt.Sprintf("topic %q partition %d: %s", k.topic, k.partition, d)
		}
	}
	return ""
}

// disorder describes the first index of idx not greater than the one
// before it, or returns "".
func disorder(idx []int) string {
	for i := 1; i < len(idx); i++ {
		if idx[i] <= idx[i-1] {
			return fmt.Sprintf("index %d arrived after %d (arrival %d of %d)", idx[i], idx[i-1], i, len(idx))
		}
	}
	return ""
}

// sourceOrder checks OrderedPerPartition of a source: of the messages New
// emits, each partition's arrive with increasing indexes, and no index
// arrives twice.
func sourceOrder[T any](t *testing.T, c SourceCase[T], n int) {
	noLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := arrivals{}
	seen := map[int]int{}
	received := 0
	g := stream.New()
	stream.To(stream.From(g, c.New(t, n)), stream.SinkFunc[T](func(ctx context.Context, in *stream.Inlet[T]) error {
		return drain(ctx, in, func(m *stream.Message[T]) {
			i := c.Index(m.Value)
			got[keyOf(&m.Envelope)] = append(got[keyOf(&m.Envelope)], i)
			seen[i]++
			in.Settle(m, stream.Completed)
			if received++; received == n && !c.Bounded {
				cancel()
			}
		})
	}))
	if err := g.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Run has returned: the sink's goroutine has ended.
	if received < n || (c.Bounded && received != n) {
		t.Fatalf("received %d messages, want %d", received, n)
	}
	if d := got.disorder(); d != "" {
		t.Fatalf("out of order: %s", d)
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("index %d arrived %d times", i, k)
		}
	}
	if c.Bounded {
		for i := range n {
			if seen[i] != 1 {
				t.Fatalf("index %d never arrived, although %d messages did", i, received)
			}
		}
	}
}

// sinkOrder checks OrderedPerPartition of a sink: every value given to
// it is written once, and each partition of its destination holds them
// with increasing indexes.
func sinkOrder[T any](t *testing.T, c SinkCase[T], values []T) {
	noLeaks(t)
	g := stream.New()
	stream.To(stream.From(g, sliceSource(values, stream.NewTracker(0))), c.New(t))
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v", err)
	}
	seen := map[int]bool{}
	for p, vs := range c.Written(t) {
		idx := make([]int, len(vs))
		for j, v := range vs {
			idx[j] = c.Index(v)
			if seen[idx[j]] {
				t.Fatalf("index %d written twice", idx[j])
			}
			seen[idx[j]] = true
		}
		if d := disorder(idx); d != "" {
			t.Fatalf("partition %d of the destination is out of order: %s", p, d)
		}
	}
	for i := range values {
		if !seen[i] {
			t.Fatalf("index %d was not written (%d of %d were)", i, len(seen), len(values))
		}
	}
}

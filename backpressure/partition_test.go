package backpressure_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

func TestPartitionLimitIsolatesASlowPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perPartition, limit = 300, 5
		tr := stream.NewTracker(0)
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 3 * perPartition {
				m := stream.NewMessage(i, tr.Track())
				m.Topic, m.Partition = "orders", int32(i%3)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		gate := make(chan struct{})
		var mu sync.Mutex
		done := map[int32]int{}
		count := func(x int) {
			mu.Lock()
			done[int32(x%3)]++
			mu.Unlock()
		}
		// A waiting room big enough for all of partition 0: the other
		// partitions never stop. (With a smaller one, the stage stops reading
		// once it is full, which bounds its memory.)
		lim := backpressure.NewPartitionLimit[int](limit, perPartition)
		g := stream.New()
		s := stream.Via(stream.From(g, src), lim)
		// Partition 0 goes to a sink that is stuck until the gate opens.
		p0, others := stream.Split(s, func(x int) bool { return x%3 == 0 })
		stream.To(p0, sink.Func(func(ctx context.Context, x int) error {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			count(x)
			return nil
		}))
		stream.To(others, sink.Func(func(_ context.Context, x int) error { count(x); return nil }))
		finished := make(chan error)
		go func() { finished <- g.Run(context.Background()) }()
		synctest.Wait()
		mu.Lock()
		p0done, p1, p2 := done[0], done[1], done[2]
		mu.Unlock()
		// The other partitions went through; partition 0 has exactly its
		// limit unsettled downstream and the rest of it waits here.
		if p0done != 0 || p1 != perPartition || p2 != perPartition {
			t.Errorf("done: p0 %d, p1 %d, p2 %d; want 0, %d, %d", p0done, p1, p2, perPartition, perPartition)
		}
		if w := lim.Waiting(); w != perPartition-limit {
			t.Errorf("%d partition-0 messages waiting, want %d", w, perPartition-limit)
		}
		close(gate)
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
		if st := tr.Stats(); st.Settled[stream.Completed] != 3*perPartition || st.Duplicates != 0 {
			t.Fatalf("settled %+v", st)
		}
	})
}

func TestPartitionLimitCountsUnsettledPerPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A sink that holds every message unsettled until released shows the
		// exact in-flight count per partition.
		const limit = 3
		var mu sync.Mutex
		var held []stream.Message[int]
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 40 {
				m := stream.NewMessage(i, stream.Handle{})
				m.Partition = int32(i % 4)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		lim := backpressure.NewPartitionLimit[int](limit, 100)
		g := stream.New()
		stream.To(stream.Via(stream.From(g, src), lim), stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
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
		finished := make(chan error)
		go func() { finished <- g.Run(context.Background()) }()
		for round := 0; ; round++ {
			synctest.Wait()
			mu.Lock()
			per := map[int32]int{}
			for _, m := range held {
				per[m.Partition]++
			}
			batch := held
			held = nil
			mu.Unlock()
			for p, n := range per {
				if n > limit {
					t.Fatalf("round %d: partition %d had %d unsettled, limit %d", round, p, n, limit)
				}
			}
			if len(batch) == 0 {
				break
			}
			for i := range batch {
				batch[i].Settle(stream.Completed)
			}
		}
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
	})
}

func TestPartitionLimitConfig(t *testing.T) {
	g := stream.New()
	stream.To(stream.Via(stream.From(g, stream.SourceFunc[int](func(context.Context, *stream.Outlet[int]) error { return nil })),
		backpressure.NewPartitionLimit[int](0, 0)), sink.Discard[int]())
	if err := g.Run(context.Background()); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Run = %v", err)
	}
}

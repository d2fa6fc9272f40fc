package stream_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

// Stats names each stage's inputs: one for a chain, every source where
// streams merge (fan-in), none for a source.
func TestStatsInputs(t *testing.T) {
	g := stream.New()
	gen := func(n int) stream.Source[int] {
		return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range n {
				if err := out.Send(ctx, stream.Message[int]{Value: i}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	a := stream.From(g, gen(3), stream.Name("a"))
	b := stream.From(g, gen(4), stream.Name("b"))
	c := stream.From(g, gen(5), stream.Name("c"))
	id := stream.FlowFunc[int, int](func(ctx context.Context, in *stream.Inlet[int], out *stream.Outlet[int]) error {
		for {
			bt, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range bt.Items {
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
		}
	})
	joined := stream.Via(stream.Merge(a, b, c), id, stream.Name("join"))
	stream.To(joined, stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		for {
			bt, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			in.SettleAll(bt.Items, stream.Completed)
		}
	}), stream.Name("end"))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, s := range g.Stats() {
		got[s.Name] = s.Inputs
	}
	for name, want := range map[string][]string{"a": nil, "join": {"a", "b", "c"}, "end": {"join"}} {
		if !slices.Equal(got[name], want) {
			t.Errorf("%s: inputs %v, want %v", name, got[name], want)
		}
	}
}

// A status page may read Stats while the pipeline is still being built
// (a worker serving its page before Run builds the pipeline): run with
// -race.
func TestStatsWhileBuilding(t *testing.T) {
	g := stream.New()
	stop := make(chan struct{})
	read := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				read <- n
				return
			default:
				for _, s := range g.Stats() {
					n += len(s.Inputs)
				}
			}
		}
	}()
	var streams []stream.Stream[int]
	for i := range 20 {
		streams = append(streams, stream.From(g, stream.SourceFunc[int](func(context.Context, *stream.Outlet[int]) error { return nil }),
			stream.Name(fmt.Sprint("source-", i))))
	}
	s := stream.Merge(streams[0], streams[1:]...)
	for i := range 20 {
		s = stream.Via(s, stream.FlowFunc[int, int](func(ctx context.Context, in *stream.Inlet[int], out *stream.Outlet[int]) error {
			for {
				b, err := in.Recv(ctx)
				if err != nil {
					return nil
				}
				for _, m := range b.Items {
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
			}
		}), stream.Name(fmt.Sprint("step-", i)))
	}
	stream.To(s, stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		for {
			if _, err := in.Recv(ctx); err != nil {
				return nil
			}
		}
	}), stream.Name("end"))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-read
	if got := g.Stats()[20].Inputs; len(got) != 20 {
		t.Errorf("the first step reads %d sources, want 20", len(got))
	}
}

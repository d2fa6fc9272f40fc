package stream_test

import (
	"context"
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

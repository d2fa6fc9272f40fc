package flow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	streams "github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// relabel is a user-defined streams.Flow: the bridge cannot know how its
// outputs relate to its inputs, whatever it wraps.
type relabel struct{ *gsflow.PassThrough }

// refusal runs f behind GoStreams and checks that Run refuses the pipeline
// before any stage starts, with a configuration error for argument f whose
// reason holds every string of want.
func refusal(t *testing.T, f streams.Flow, want ...string) {
	t.Helper()
	started := false
	src := stream.SourceFunc[int](func(context.Context, *stream.Outlet[int]) error {
		started = true
		return nil
	})
	g := stream.New()
	s := stream.Via(stream.From(g, src), flow.GoStreams[int, any](f), stream.Name("bridge"))
	stream.To(s, sink.Discard[any]())
	err := g.Run(context.Background())
	var ce *stream.ConfigError
	if !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) {
		t.Fatalf("Run = %v, want a configuration error wrapping stream.ErrInvalid", err)
	}
	if ce.Stage != "bridge" || ce.Argument != "f" {
		t.Errorf("error names stage %q argument %q, want bridge and f", ce.Stage, ce.Argument)
	}
	for _, w := range want {
		if !strings.Contains(ce.Reason, w) {
			t.Errorf("reason %q does not mention %q", ce.Reason, w)
		}
	}
	if started {
		t.Error("the source ran: the refusal must come before any stage starts")
	}
}

func TestGoStreamsRefusesOperatorsThatBreakSettling(t *testing.T) {
	cases := []struct {
		name string
		f    func() streams.Flow
		want []string
	}{
		{"keyed tumbling window", func() streams.Flow {
			return gsflow.NewKeyed(func(x int) int { return x % 3 },
				func() streams.Flow { return gsflow.NewTumblingWindow[int](time.Second) })
		}, []string{"Keyed", "interleave"}},
		{"sliding window", func() streams.Flow {
			return gsflow.NewSlidingWindow[int](2*time.Second, time.Second)
		}, []string{"SlidingWindow", "several windows"}},
		{"filter", func() streams.Flow {
			return gsflow.NewFilter(func(x int) bool { return x%2 == 0 }, 1)
		}, []string{"Filter", "flow.Filter"}},
		{"flat map", func() streams.Flow {
			return gsflow.NewFlatMap(func(x int) []int { return []int{x, x} }, 1)
		}, []string{"FlatMap", "flow.FlatMap"}},
		{"map", func() streams.Flow {
			return gsflow.NewMap(func(x int) int { return x }, 1)
		}, []string{"Map", "panic", "flow.Map"}},
		{"fold", func() streams.Flow {
			return gsflow.NewFold(0, func(x, acc int) int { return x + acc })
		}, []string{"Fold", "panic"}},
		{"reduce", func() streams.Flow {
			return gsflow.NewReduce(func(a, b int) int { return a + b })
		}, []string{"Reduce", "panic"}},
		{"throttler in discard mode", func() streams.Flow {
			return gsflow.NewThrottler(10, time.Second, 10, gsflow.Discard)
		}, []string{"Throttler", "Discard", "drops"}},
		{"user-defined flow", func() streams.Flow {
			return relabel{gsflow.NewPassThrough()}
		}, []string{"relabel", "PassThrough", "TumblingWindow"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refusal(t, c.f(), c.want...) })
	}
}

// The bridge reads go-streams v0.13.0's unexported field Throttler.mode. If
// an upgrade renames it, the accepted half of this pair is refused and this
// test fails.
func TestGoStreamsReadsOperatorSettings(t *testing.T) {
	t.Run("Throttler Backpressure accepted", func(t *testing.T) {
		bridged(t, gsflow.NewThrottler(1000, time.Millisecond, 10, gsflow.Backpressure), single, feedN(10))
	})
	t.Run("Throttler Discard refused", func(t *testing.T) {
		refusal(t, gsflow.NewThrottler(1000, time.Millisecond, 10, gsflow.Discard), "Discard")
	})
}

// The sliding window and filter of the old bridge test: both are refused,
// and the flows their constructors started end (goleak checks it in
// TestMain).
func TestGoStreamsSlidingWindowAndFilter(t *testing.T) {
	refusal(t, gsflow.NewFilter(func(x int) bool { return x%2 == 0 }, 1), "Filter")
	refusal(t, gsflow.NewSlidingWindow[int](2*time.Second, time.Second), "SlidingWindow")
}

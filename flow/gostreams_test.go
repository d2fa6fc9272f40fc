package flow_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func TestGoStreamsTumblingWindowInsidePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ch := make(chan int)
		g := stream.New()
		s := stream.From(g, source.Channel(ch, source.Track(tr)))
		windows := stream.Via(s, flow.GoStreams[int, []int](gsflow.NewTumblingWindow[int](time.Second)))
		sums := stream.Via(windows, flow.Map(func(w []int) (int, error) {
			sum := 0
			for _, v := range w {
				sum += v
			}
			return sum, nil
		}))
		out := sink.Collect[int]()
		stream.To(sums, out)
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		for sec := range 3 {
			for i := range 10 {
				ch <- sec*10 + i
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, v := range out.Values() {
			total += v
		}
		if total != 29*30/2 {
			t.Fatalf("window sums add to %d, want %d (values %v)", total, 29*30/2, out.Values())
		}
		checkSettled(t, tr)
	})
}

func TestGoStreamsSlidingWindowAndFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ch := make(chan int)
		g := stream.New()
		s := stream.From(g, source.Channel(ch, source.Track(tr)))
		even := stream.Via(s, flow.GoStreams[int, int](gsflow.NewFilter(func(x int) bool { return x%2 == 0 }, 1)))
		win := stream.Via(even, flow.GoStreams[int, []int](gsflow.NewSlidingWindow[int](2*time.Second, time.Second)))
		out := sink.Collect[[]int]()
		stream.To(win, out)
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		for sec := range 5 {
			for i := range 10 {
				ch <- sec*10 + i
			}
			time.Sleep(time.Second)
		}
		time.Sleep(3 * time.Second)
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		seen := map[int]int{}
		for _, w := range out.Values() {
			for _, v := range w {
				if v%2 != 0 {
					t.Fatalf("odd value %d passed the go-streams filter", v)
				}
				seen[v]++
			}
		}
		// A 2 s window sliding by 1 s holds each value in two windows.
		if len(seen) != 25 {
			t.Fatalf("windows hold %d distinct values, want 25: %v", len(seen), out.Values())
		}
		checkSettled(t, tr)
	})
}

func TestGoStreamsWrongOutputTypeIsFatal(t *testing.T) {
	g := stream.New()
	s := stream.From(g, source.Slice(ints(10)))
	bad := stream.Via(s, flow.GoStreams[int, string](gsflow.NewMap(func(x int) int { return x }, 1)), stream.Name("bridge"))
	stream.To(bad, sink.Discard[string]())
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "bridge" || !stream.IsFatal(err) {
		t.Fatalf("Run = %v, want a fatal StageError from bridge", err)
	}
}

package flow_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func collect[T any](g *stream.Graph, s stream.Stream[T]) *sink.Collector[T] {
	c := sink.Collect[T]()
	stream.To(s, c)
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	return c
}

func ExampleMap() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"a", "bb"})), flow.Map(func(s string) (int, error) { return len(s), nil }))
	fmt.Println(collect(g, s).Values())
	// Output: [1 2]
}

func ExampleFilter() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4})), flow.Filter(func(n int) bool { return n%2 == 0 }))
	fmt.Println(collect(g, s).Values())
	// Output: [2 4]
}

func ExampleFlatMap() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"a b", "", "c"})), flow.FlatMap(func(s string) ([]string, error) {
		return strings.Fields(s), nil
	}))
	fmt.Println(collect(g, s).Values())
	// Output: [a b c]
}

func ExampleBatch() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4, 5})), flow.Batch[int](2, time.Second))
	fmt.Println(collect(g, s).Values())
	// Output: [[1 2] [3 4] [5]]
}

func ExampleThrottle() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3})), flow.Throttle[int](1000, 1))
	fmt.Println(collect(g, s).Values())
	// Output: [1 2 3]
}

// A go-streams operator inside a sluice pipeline: its Batch groups values,
// then a sluice Map sums each group.
func ExampleGoStreams() {
	g := stream.New()
	groups := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4, 5, 6})),
		flow.GoStreams[int, []int](gsflow.NewBatch[int](3, time.Minute)))
	sums := stream.Via(groups, flow.Map(func(vs []int) (int, error) {
		t := 0
		for _, v := range vs {
			t += v
		}
		return t, nil
	}))
	fmt.Println(collect(g, sums).Values())
	// Output: [6 15]
}

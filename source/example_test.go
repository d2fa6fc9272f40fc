package source_test

import (
	"context"
	"fmt"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func ExampleSlice() {
	tr := stream.NewTracker(0)
	g := stream.New()
	out := sink.Collect[string]()
	stream.To(stream.From(g, source.Slice([]string{"a", "b"}, source.Track(tr))), out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values(), tr.Watermark())
	// Output: [a b] 2
}

func ExampleChannel() {
	ch := make(chan int, 3)
	ch <- 1
	ch <- 2
	ch <- 3
	close(ch)
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.From(g, source.Channel(ch)), out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values())
	// Output: [1 2 3]
}

func ExampleGenerator() {
	g := stream.New()
	out := sink.Collect[int64]()
	gen := source.Generator(func(seq int64) int64 { return seq * seq }, source.Count(4), source.Rate(10_000, 10))
	stream.To(stream.From(g, gen), out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values())
	// Output: [0 1 4 9]
}

func ExampleGoStreams() {
	ch := make(chan any, 2)
	ch <- "x"
	ch <- "y"
	close(ch)
	g := stream.New()
	out := sink.Collect[string]()
	stream.To(stream.From(g, source.GoStreams[string](extension.NewChanSource(ch))), out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values())
	// Output: [x y]
}

// Three levels read by one priority source (in a deployment, three Kafka
// sources of the topics deliveries-high, -normal and -low), served 6:3:1
// while all have work; each message leaves tagged with its level.
func ExamplePriority() {
	g := stream.New()
	levels := []source.Level[string]{
		{Name: "high", Source: source.Slice([]string{"h1", "h2"})},
		{Name: "normal", Source: source.Slice([]string{"n1"})},
		{Name: "low", Source: source.Slice([]string{"l1", "l2", "l3"})},
	}
	s := source.Priority(g, backpressure.WeightedPriority(6, 3, 1), levels)
	c := sink.Collect[string]()
	stream.To(s, c)
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	perLevel := map[uint8]int{}
	for _, m := range c.Messages() {
		perLevel[m.Priority]++
	}
	fmt.Println("high", perLevel[0], "normal", perLevel[1], "low", perLevel[2])
	// Output: high 2 normal 1 low 3
}

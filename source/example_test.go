package source_test

import (
	"context"
	"fmt"

	"github.com/reugn/go-streams/extension"

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

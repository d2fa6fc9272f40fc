package sink_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func ExampleDiscard() {
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{1, 2, 3}, source.Track(tr))), sink.Discard[int]())
	_ = g.Run(context.Background())
	fmt.Println(tr.Stats().Settled[stream.Completed])
	// Output: 3
}

func ExampleCollect() {
	g := stream.New()
	c := sink.Collect[int]()
	stream.To(stream.From(g, source.Slice([]int{1, 2})), c)
	_ = g.Run(context.Background())
	fmt.Println(c.Values())
	// Output: [1 2]
}

// A Collector of failures keeps them for inspection and settles them as
// dead-lettered.
func ExampleCollect_failures() {
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{1, 2}, source.Track(tr))), sink.Func(func(_ context.Context, n int) error {
		if n == 2 {
			return errors.New("cannot store 2")
		}
		return nil
	}), stream.Name("store"))
	failures := sink.Collect[stream.Failure]()
	stream.To(g.Failures(), failures)
	_ = g.Run(context.Background())
	for _, f := range failures.Values() {
		fmt.Println(f)
	}
	st := tr.Stats()
	fmt.Println(st.Settled[stream.Completed], "completed,", st.Settled[stream.DeadLettered], "dead-lettered")
	// Output:
	// stage "store": cannot store 2
	// 1 completed, 1 dead-lettered
}

func ExampleFunc() {
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]string{"hello", "world"})), sink.Func(func(_ context.Context, s string) error {
		fmt.Println(s)
		return nil
	}))
	_ = g.Run(context.Background())
	// Output:
	// hello
	// world
}

func ExampleDeadLetterFunc() {
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{1, 2})), sink.Func(func(_ context.Context, n int) error {
		if n == 2 {
			return errors.New("cannot store 2")
		}
		return nil
	}), stream.Name("store"))
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		fmt.Printf("offset %d failed in %s: %v\n", m.Offset, m.Value.Stage, m.Value.Err)
		return nil
	}))
	_ = g.Run(context.Background())
	// Output: offset 1 failed in store: cannot store 2
}

func ExampleGoStreams() {
	ch := make(chan any)
	done := make(chan struct{})
	go func() {
		for v := range ch {
			fmt.Println("go-streams got", v)
		}
		close(done)
	}()
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{7, 8})), sink.GoStreams[int](extension.NewChanSink(ch)))
	_ = g.Run(context.Background())
	<-done
	// Output:
	// go-streams got 7
	// go-streams got 8
}

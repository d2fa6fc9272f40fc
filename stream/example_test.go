package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// A pipeline in ten lines: parse, drop the invalid, transform, collect;
// malformed input goes to the failure stream with its reason.
// README.md and docs/getting-started.md show this body as a whole program
// (internal/doclinks checks that they match).
func Example() {
	g := stream.New()
	raw := stream.From(g, source.Slice([]string{"1", "2", "x", "40", "-3"}))
	nums := stream.Via(raw, flow.Map(strconv.Atoi), stream.Name("parse"))
	positive := stream.Via(nums, flow.Filter(func(n int) bool { return n > 0 }))
	doubled := stream.Via(positive, flow.Map(func(n int) (int, error) { return 2 * n, nil }))
	out := sink.Collect[int]()
	stream.To(doubled, out)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		fmt.Println("dead letter:", m.Value.Stage, m.Value.Value)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println(out.Values())
	// Output:
	// dead letter: parse x
	// [2 4 80]
}

func ExampleMerge() {
	g := stream.New()
	a := stream.From(g, source.Slice([]int{1, 2, 3}))
	b := stream.From(g, source.Slice([]int{10, 20}))
	out := sink.Collect[int]()
	stream.To(stream.Merge(a, b), out)
	_ = g.Run(context.Background())
	got := out.Values()
	slices.Sort(got) // inputs interleave as they arrive
	fmt.Println(got)
	// Output: [1 2 3 10 20]
}

func ExampleBroadcast() {
	g := stream.New()
	outs := stream.Broadcast(stream.From(g, source.Slice([]int{1, 2, 3})), 2)
	all, odd := sink.Collect[int](), sink.Collect[int]()
	stream.To(outs[0], all)
	stream.To(stream.Via(outs[1], flow.Filter(func(n int) bool { return n%2 == 1 })), odd)
	_ = g.Run(context.Background())
	fmt.Println(all.Values(), odd.Values())
	// Output: [1 2 3] [1 3]
}

func ExampleRoute() {
	g := stream.New()
	lanes, errs := stream.Route(stream.From(g, source.Slice([]string{"high:a", "low:b", "high:c", "bogus"})), 2,
		func(s string) (int, error) {
			switch {
			case len(s) > 5 && s[:5] == "high:":
				return 0, nil
			case len(s) > 4 && s[:4] == "low:":
				return 1, nil
			}
			return 0, errors.New("no priority")
		})
	high, low := sink.Collect[string](), sink.Collect[string]()
	stream.To(lanes[0], high)
	stream.To(lanes[1], low)
	stream.To(errs, sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		fmt.Printf("%v: %v\n", m.Value.Value, m.Value.Err)
		return nil
	}))
	_ = g.Run(context.Background())
	fmt.Println(high.Values(), low.Values())
	// Output:
	// bogus: no priority
	// [high:a high:c] [low:b]
}

func ExampleSplit() {
	g := stream.New()
	small, big := stream.Split(stream.From(g, source.Slice([]int{5, 500, 7, 700})), func(n int) bool { return n < 100 })
	s, b := sink.Collect[int](), sink.Collect[int]()
	stream.To(small, s)
	stream.To(big, b)
	_ = g.Run(context.Background())
	fmt.Println(s.Values(), b.Values())
	// Output: [5 7] [500 700]
}

// A Tracker shows what a checkpointing source does with settles: it may
// commit up to the watermark, below which every message is done, whatever
// the order in which they were settled.
func ExampleTracker() {
	tr := stream.NewTracker(100)
	h := []stream.Handle{tr.Track(), tr.Track(), tr.Track()}
	h[1].Settle(stream.Completed)
	fmt.Println(tr.Watermark())
	h[0].Settle(stream.Filtered)
	fmt.Println(tr.Watermark())
	h[2].Settle(stream.DeadLettered)
	fmt.Println(tr.Watermark(), tr.Pending())
	// Output:
	// 100
	// 102
	// 103 0
}

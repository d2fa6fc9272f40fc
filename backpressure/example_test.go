package backpressure_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// A buffer that sheds the oldest load when its consumer falls behind; with
// a consumer that keeps up nothing is dropped.
func ExampleNewBuffer() {
	buf := backpressure.NewBuffer[int](1000, backpressure.DropOldest)
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3})), buf)
	out := sink.Collect[int]()
	stream.To(s, out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values(), buf.Stats().Dropped)
	// Output: [1 2 3] 0
}

// An adaptive limiter learns the service's unloaded latency and holds the
// p99 of the calls it admits near twice that (or a configured Target).
func ExampleNewAdaptive() {
	lim, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Target: 50 * time.Millisecond, Initial: 10, Max: 200})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 128 { // a window of fast calls while the limit was reached
		lim.Observe(backpressure.Sample{Latency: 5 * time.Millisecond, InFlight: 10})
	}
	fmt.Println(lim.Limit())
	// Output: 20
}

// At most two unsettled messages per partition leave the limit; here the
// sink settles each at once, so all pass.
func ExampleNewPartitionLimit() {
	src := stream.SourceFunc[string](func(ctx context.Context, out *stream.Outlet[string]) error {
		for i, v := range []string{"a0", "b0", "a1", "b1", "a2"} {
			m := stream.NewMessage(v, stream.Handle{})
			m.Topic, m.Partition = "orders", int32(i%2)
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	s := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[string](2, 0))
	out := sink.Collect[string]()
	stream.To(s, out)
	_ = g.Run(context.Background())
	fmt.Println(len(out.Values()))
	// Output: 5
}

package backpressure_test

import (
	"context"
	"fmt"

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
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3})), stream.Flow[int, int](buf))
	out := sink.Collect[int]()
	stream.To(s, out)
	_ = g.Run(context.Background())
	fmt.Println(out.Values(), buf.Dropped())
	// Output: [1 2 3] 0
}

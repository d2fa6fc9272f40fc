package checkpoint_test

import (
	"context"
	"fmt"

	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// With a Kafka source the committer is the source itself:
// checkpoint.New[[]byte](src). Here a tracker stands in for the source.
func ExampleNew() {
	tr := stream.NewTracker(0)
	commit := stream.CommitterFunc(func(context.Context) error {
		fmt.Println("commit up to", tr.Watermark())
		return nil
	})
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]string{"a", "b", "c"}, source.Track(tr))),
		checkpoint.New[string](commit, checkpoint.Every(1000)))
	_ = g.Run(context.Background())
	// Output: commit up to 3
}

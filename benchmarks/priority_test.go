package benchmarks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// BenchmarkPrioritySource measures what the priority source costs per
// message over a plain merge of the same three sources (stream.Merge), in
// one run: sub-benchmarks merge (the baseline), strict, weighted_6_3_1
// and strict_aging, each reporting ns/msg. Compare the ratios, not the
// absolute figures (the machines are noisy).
func BenchmarkPrioritySource(b *testing.B) {
	const perLevel = 200_000
	vals := make([]int, perLevel)
	for _, c := range []struct {
		name string
		p    *backpressure.Priority
	}{
		{"merge", nil},
		{"strict", ptr(backpressure.StrictPriority(3))},
		{"weighted_6_3_1", ptr(backpressure.WeightedPriority(6, 3, 1))},
		{"strict_aging", ptr(backpressure.StrictPriority(3).Aging(0, time.Second, time.Second))},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g := stream.New()
				var s stream.Stream[int]
				if c.p == nil {
					s = stream.Merge(stream.From(g, source.Slice(vals)), stream.From(g, source.Slice(vals)), stream.From(g, source.Slice(vals)))
				} else {
					levels := make([]source.Level[int], 3)
					for i := range levels {
						levels[i] = source.Level[int]{Name: fmt.Sprint("level-", i), Source: source.Slice(vals)}
					}
					s = source.Priority(g, *c.p, levels)
				}
				stream.To(s, sink.Discard[int]())
				if err := g.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3*perLevel), "ns/msg")
		})
	}
}

func ptr[T any](v T) *T { return &v }

package flow_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// Door openings counted per home and minute of event time. A slice source
// gives no record timestamps, so each reading's event time is its arrival;
// the one from 12:00:10 that comes after 12:01:40 is later than the
// 30-second lateness and goes to the failure stream instead.
func ExampleTumbling() {
	type opening struct {
		home string
		at   time.Time
	}
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	in := []opening{
		{"h1", t0.Add(5 * time.Second)}, {"h2", t0.Add(20 * time.Second)}, {"h1", t0.Add(50 * time.Second)},
		{"h1", t0.Add(70 * time.Second)}, {"h2", t0.Add(100 * time.Second)}, {"h2", t0.Add(10 * time.Second)},
	}
	g := stream.New()
	counts := stream.Via(stream.From(g, source.Slice(in)), flow.Tumbling(time.Minute,
		func(m *stream.Message[opening]) string { return m.Value.home },
		func(o *opening) time.Time { return o.at },
		func(n *int, _ *opening) { *n++ },
		flow.Lateness(30*time.Second)))
	late := 0
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
		late++
		return nil
	}))
	for _, m := range collect(g, counts).Messages() {
		var panes []string
		for _, p := range m.Value.Panes {
			panes = append(panes, fmt.Sprintf("%s:%d", p.Key, p.Value))
		}
		slices.Sort(panes)
		fmt.Println(m.Value.Start.Format("15:04"), strings.Join(panes, " "))
	}
	fmt.Println("late:", late)
	// Output:
	// 12:00 h1:2 h2:1
	// 12:01 h1:1 h2:1
	// late: 1
}

package flow_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// Windows of 30 days near the earliest time a nanosecond count holds
// (1677): a window's start (rounded down), its end and the closing limit
// (arrival less lateness and size) must not wrap around. Two readings of
// one key 200 days after that edge make one window; a reading 2 days
// after it, where that arithmetic would wrap, is failed with a reason
// that says so, instead of being placed in a window that ends before it
// starts or closing the partition's windows.
func TestTumblingLongWindowsNearTheEdgeOfTimeDoNotOverflow(t *testing.T) {
	const month = 30 * 24 * time.Hour
	t0 := time.Unix(0, math.MinInt64+int64(200*24*time.Hour))
	edge := time.Unix(0, math.MinInt64+int64(2*24*time.Hour))
	recs := []rec{
		{0, t0, reading{"a", t0, 1}},
		{1, edge, reading{"b", edge, 1}},
		{0, t0.Add(time.Hour), reading{"a", t0.Add(time.Hour), 2}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	w := flow.Tumbling(month, func(m *stream.Message[reading]) string { return m.Value.key },
		func(r *reading) time.Time { return r.event }, func(a *agg, r *reading) { a.n++; a.sum += r.v })
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), w), out)
	var late lateLog
	late.sink(g)
	run(t, g)
	ws := out.windows()
	if len(ws) != 1 || ws[0].Partition != 0 || ws[0].Count != 2 || ws[0].Start.After(t0) || !ws[0].End.After(t0.Add(time.Hour)) {
		t.Errorf("windows %+v; want one of partition 0 holding both its readings", ws)
	}
	if len(late.errs) != 1 || late.errs[0].Partition != 1 || !late.errs[0].Beyond {
		t.Fatalf("failed %+v; want partition 1's reading, beyond the times windows are computed in", late.errs)
	}
	t.Log(late.errs[0])
}

// Validate refuses a size, lateness and MaxAhead that leave no room in a
// nanosecond count.
func TestTumblingRefusesSpansOfCenturies(t *testing.T) {
	w := flow.Tumbling(200*365*24*time.Hour, func(m *stream.Message[reading]) string { return m.Value.key },
		func(r *reading) time.Time { return r.event }, func(a *agg, r *reading) {})
	err := w.(interface{ Validate() error }).Validate()
	var ce *stream.ConfigError
	if !errors.As(err, &ce) || ce.Argument != "size" {
		t.Fatalf("Validate() = %v; want a ConfigError naming size", err)
	}
}

package flow_test

import (
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// An event time past 2262 overflows time.Time.UnixNano; chosen so that it
// wraps onto the arrival, it must still be failed as ahead, not counted in
// the current minute.
func TestTumblingEventTimeBeyondUnixNanoRangeIsFailedNotAggregated(t *testing.T) {
	far := time.UnixMilli(at(0, 2).UnixMilli() + 1<<58) // wraps to at(0, 2) in UnixNano
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(0, 2), reading{"a", far, 1}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow()), out)
	var late lateLog
	late.sink(g)
	run(t, g)
	total := 0
	for _, w := range out.windows() {
		total += w.Count
	}
	if total != 1 || len(late.errs) != 1 {
		t.Fatalf("event time %s (year %d): %d readings in windows and %d failed, want 1 and 1",
			far.UTC().Format(time.RFC3339), far.Year(), total, len(late.errs))
	}
}

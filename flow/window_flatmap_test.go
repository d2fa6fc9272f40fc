package flow_test

import (
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// A record that carries two readings is split by FlatMap before the
// window: each output gets its own fanout settler, so the window must not
// take each message for a new assignment of the partition (discarding
// every open window, unsettled, which leaves the partition's checkpoint
// stuck at the first message forever).
func TestTumblingAfterFlatMapKeepsWindowsAndSettles(t *testing.T) {
	var recs []rec
	for sec := 0; sec < 120; sec += 10 {
		recs = append(recs, rec{0, at(0, sec+1), reading{"a", at(0, sec), 1}})
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	split := flow.FlatMap(func(r reading) ([]reading, error) {
		r2 := r
		r2.key = "b"
		return []reading{r, r2}, nil
	})
	stream.To(stream.Via(stream.Via(stream.From(g, stream.Source[reading](src)), split),
		sumWindow(flow.Lateness(10*time.Second))), out)
	run(t, g)
	total := 0
	for _, w := range out.windows() {
		total += w.Count
	}
	if total != 2*len(recs) {
		t.Errorf("%d readings in windows, want %d", total, 2*len(recs))
	}
	tr := src.tracker(0)
	if st := tr.Stats(); st.Total() != st.Issued || tr.Watermark() != st.Issued {
		t.Fatalf("settled %+v, watermark %d: the partition's checkpoint is stuck", st, tr.Watermark())
	}
}

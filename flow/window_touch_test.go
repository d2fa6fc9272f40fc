package flow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// A key that panics while a batch is touched (before its messages are
// placed) fails only its message, as one that panics while placing it.
func TestTumblingKeyPanicInTouchFailsOnlyThatMessage(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(0, 2), reading{"boom", at(0, 1), 1}},
		{0, at(0, 3), reading{"a", at(0, 2), 1}},
		{0, at(0, 4), reading{"b", at(0, 3), 1}},
	}
	src := newLog(recs)
	// The rest comes once the first message has opened the window, so
	// that the batch holding "boom" is touched.
	src.pauseAt, src.release = 1, make(chan struct{})
	var once sync.Once
	boomCalls := 0
	key := func(m *stream.Message[reading]) string {
		if m.Value.key == "boom" {
			boomCalls++
			panic("bad key")
		}
		once.Do(func() { close(src.release) })
		return m.Value.key
	}
	g := stream.New()
	out := &windowSink{}
	w := flow.Tumbling(time.Minute, key, func(r *reading) time.Time { return r.event },
		func(a *agg, r *reading) { a.n++; a.sum += r.v })
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), w), out)
	failed := 0
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { failed++; return nil }))
	run(t, g)
	ws := out.windows()
	if len(ws) != 1 || len(ws[0].Panes) != 2 || ws[0].Count != 3 || failed != 1 {
		t.Fatalf("windows %+v, failed %d", ws, failed)
	}
	// Once in the touch, once where it was to be placed.
	if boomCalls != 2 {
		t.Errorf("key called %d times for the panicking message, want 2", boomCalls)
	}
	checkSettled(t, src.tracker(0))
}

package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// The consumer stalls (the broker is unreachable, a long pause) for
// longer than IdleClose while producers go on: the partition's records
// keep their timestamps, all on time. When reading resumes, the readings
// of the minute that was open are within the lateness of their own
// arrival, yet the idle close has emitted that minute early, so they are
// dead-lettered as "already written" and their offsets committed: valid
// readings lost from the aggregate because the reader, not the
// producer, was idle (DESIGN, load levelling: the stream is the buffer).
// IdleWhen, told by the source that the partition is not read to its end,
// keeps the minute open.
func TestTumblingConsumerStallWithIdleWhenKeepsOnTimeReadings(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(0, 11), reading{"a", at(0, 10), 1}},
		// the consumer stalls here; these were produced meanwhile, on time
		{0, at(0, 21), reading{"a", at(0, 20), 1}},
		{0, at(0, 31), reading{"b", at(0, 30), 1}},
		{0, at(1, 15), reading{"a", at(1, 14), 1}}, // closes minute 0 (lateness 10 s)
	}
	src := newLog(recs)
	src.pauseAt, src.release = 2, make(chan struct{})
	g := stream.New()
	out := &windowSink{}
	behind := func(string, int32) bool { return false } // records wait at the broker throughout the stall
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)),
		sumWindow(flow.Lateness(10*time.Second), flow.IdleClose(100*time.Millisecond), flow.IdleWhen(behind))), out)
	var late lateLog
	late.sink(g)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	time.Sleep(400 * time.Millisecond) // the stall
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var m0 int
	for _, w := range out.windows() {
		if w.Start.Equal(at(0, 0)) {
			m0 += w.Count
		}
	}
	if m0 != 4 || len(late.errs) != 0 {
		for _, e := range late.errs {
			t.Logf("dead-lettered offset %d: %v", e.Offset, e)
		}
		t.Fatalf("minute 0 holds %d of its 4 on-time readings; %d dead-lettered", m0, len(late.errs))
	}
}

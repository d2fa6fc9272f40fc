package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// A single record whose timestamp is far ahead (a producer with a wrong
// clock) is itself dead-lettered as late (its event time is far before
// its arrival), but it must not move the partition's stream time: the
// readings after it, on time by their own timestamps, must still be
// aggregated, and the current minute not closed early.
func TestTumblingRecordTimestampFarAheadDoesNotCloseTheOtherReadingsWindows(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(60, 2), reading{"b", at(0, 1), 1}}, // the record's timestamp is an hour ahead
		{0, at(0, 3), reading{"a", at(0, 2), 1}},
		{0, at(0, 30), reading{"a", at(0, 29), 1}},
		{0, at(1, 5), reading{"a", at(1, 4), 1}},
		{0, at(1, 40), reading{"a", at(1, 39), 1}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second))), out)
	var late lateLog
	late.sink(g)
	run(t, g)
	if len(late.errs) != 1 {
		for _, e := range late.errs {
			t.Logf("dead-lettered offset %d: %v", e.Offset, e)
		}
		t.Fatalf("%d messages dead-lettered, want only the one with the bad timestamp", len(late.errs))
	}
	total := 0
	for _, w := range out.windows() {
		total += w.Count
	}
	if total != 5 {
		t.Fatalf("%d readings in windows, want 5", total)
	}
}

// After a record whose timestamp is an hour ahead, the partition's later
// windows no longer close as its stream time passes them: with the input
// open and no idle close, minute 1 is still not emitted (and none of its
// readings, nor any later offset, settled) when minute 4 is being read.
func TestTumblingRecordTimestampFarAheadStopsThePartitionsWindowsClosing(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(60, 2), reading{"b", at(0, 1), 1}}, // the record's timestamp is an hour ahead
	}
	for min := 1; min < 5; min++ {
		for sec := 0; sec < 60; sec += 15 {
			recs = append(recs, rec{0, at(min, sec+1), reading{"a", at(min, sec), 1}})
		}
	}
	src := newLog(recs)
	src.pauseAt, src.release = len(recs), make(chan struct{})
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)),
		sumWindow(flow.Lateness(10*time.Second), flow.IdleClose(0))), out)
	var late lateLog
	late.sink(g)
	tr := src.tracker(0)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && tr.Watermark() < 7 {
		time.Sleep(5 * time.Millisecond)
	}
	wm := tr.Watermark()
	emitted := len(out.windows())
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if wm < 7 {
		t.Fatalf("watermark %d of %d while minute 4 is read: minutes 1-3 never closed (windows emitted by then: %d)", wm, len(recs), emitted)
	}
}

package flow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// slowSink settles each Windows message after a delay, like a writer to a
// slow store.
type slowSink struct {
	delay time.Duration
	mu    sync.Mutex
	got   []flow.Windows[string, agg]
}

func (s *slowSink) Run(ctx context.Context, in *stream.Inlet[flow.Windows[string, agg]]) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			return nil
		}
		for i := range b.Items {
			time.Sleep(s.delay)
			s.mu.Lock()
			s.got = append(s.got, b.Items[i].Value)
			s.mu.Unlock()
			in.Settle(&b.Items[i], stream.Completed)
		}
		b.Release()
	}
}

// A busy partition read as fast as a slow writer allows (backpressure:
// the window blocks sending, its input fills) is not idle: no window of
// it may be emitted early, and so no reading within the lateness may be
// dead-lettered because its window was "already written". The stream is
// the buffer (DESIGN: load levelling). Holds today: the idle tick carries
// the time it fired, so a tick buffered while the stage was blocked does
// not find the partition idle.
func TestTumblingSlowWriterDoesNotMakeABusyPartitionIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a slow writer in real time: make test runs it, -short does not")
	}
	var recs []rec
	for min := range 30 {
		for sec := 0; sec < 60; sec += 5 {
			// Each reading arrives 2 s after its event time; lateness 10 s.
			recs = append(recs, rec{int32(min % 2), at(min, sec+2), reading{"a", at(min, sec), 1}})
			recs = append(recs, rec{int32(min % 2), at(min, sec+2), reading{"b", at(min, sec), 1}})
		}
	}
	src := newLog(recs)
	g := stream.New()
	out := &slowSink{delay: 60 * time.Millisecond}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)),
		sumWindow(flow.Lateness(10*time.Second), flow.IdleClose(20*time.Millisecond))), out, stream.Buffer(1))
	var late lateLog
	late.sink(g)
	run(t, g)
	total := 0
	for _, w := range out.got {
		total += w.Count
	}
	if len(late.errs) != 0 || total != len(recs) {
		for i, e := range late.errs {
			if i < 3 {
				t.Logf("dead-lettered: %v", e)
			}
		}
		t.Fatalf("%d of %d readings in windows, %d readings dead-lettered as late", total, len(recs), len(late.errs))
	}
}

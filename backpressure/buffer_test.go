package backpressure_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

const total = 10_000

// gatedRun runs slice(total) -> buffer -> sink, where the sink takes one
// message and then waits for the gate. Once everything is blocked it calls
// whileBlocked, opens the gate, and returns what the sink received.
func gatedRun(t *testing.T, buf *backpressure.Buffer[int], tr *stream.Tracker, whileBlocked func()) ([]int, error) {
	t.Helper()
	vs := make([]int, total)
	for i := range vs {
		vs[i] = i
	}
	gate := make(chan struct{})
	var got []int
	g := stream.New(stream.WithCapacity(256), stream.WithBatchSize(64))
	s := stream.Via(stream.From(g, source.Slice(vs, source.Track(tr))), buf)
	stream.To(s, sink.Func(func(_ context.Context, x int) error {
		if len(got) == 0 {
			<-gate
		}
		got = append(got, x)
		return nil
	}))
	done := make(chan error)
	go func() { done <- g.Run(context.Background()) }()
	synctest.Wait()
	whileBlocked()
	close(gate)
	return got, <-done
}

func TestBlockLosesNothingAndBoundsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		buf := backpressure.NewBuffer[int](100, backpressure.Block)
		got, err := gatedRun(t, buf, tr, func() {
			// Slow sink, source stopped: in flight are at most two pipes
			// of 256 (+ one batch of 64 each in hand), the buffer's 100 and
			// its outgoing batch of 64.
			if p := tr.Pending(); p > 2*(256+2*64)+100+64 {
				t.Errorf("%d messages in flight with a stalled sink: memory not bounded", p)
			}
			if tr.Stats().Issued == total {
				t.Errorf("source was not slowed down by the stalled sink")
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != total || buf.Stats().Dropped != 0 {
			t.Fatalf("delivered %d, dropped %d", len(got), buf.Stats().Dropped)
		}
	})
}

func TestDropNewestKeepsTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		buf := backpressure.NewBuffer[int](100, backpressure.DropNewest)
		got, err := gatedRun(t, buf, tr, func() {
			if tr.Stats().Issued != total {
				t.Errorf("a dropping buffer must keep reading: source issued %d", tr.Stats().Issued)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		st := tr.Stats()
		if buf.Stats().Dropped == 0 || int64(len(got))+buf.Stats().Dropped != total || st.Settled[stream.Dropped] != buf.Stats().Dropped {
			t.Fatalf("delivered %d + dropped %d != %d (tracker %+v)", len(got), buf.Stats().Dropped, total, st)
		}
		if !slices.IsSorted(got) || got[len(got)-1] == total-1 {
			t.Fatalf("drop-newest delivered the newest message: %v", got[len(got)-5:])
		}
		if st.Total() != total || st.Duplicates != 0 {
			t.Fatalf("settle contract broken: %+v", st)
		}
	})
}

func TestDropOldestKeepsTheNewest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		buf := backpressure.NewBuffer[int](100, backpressure.DropOldest)
		got, err := gatedRun(t, buf, tr, func() {})
		if err != nil {
			t.Fatal(err)
		}
		st := tr.Stats()
		if buf.Stats().Dropped == 0 || int64(len(got))+buf.Stats().Dropped != total || st.Settled[stream.Dropped] != buf.Stats().Dropped {
			t.Fatalf("delivered %d + dropped %d != %d", len(got), buf.Stats().Dropped, total)
		}
		if !slices.IsSorted(got) || got[len(got)-1] != total-1 {
			t.Fatalf("drop-oldest lost the newest message: %v", got[len(got)-5:])
		}
		if st.Total() != total || st.Duplicates != 0 || tr.Watermark() != total {
			t.Fatalf("settle contract broken: %+v", st)
		}
	})
}

func TestFailEndsPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		buf := backpressure.NewBuffer[int](100, backpressure.Fail)
		_, err := gatedRun(t, buf, tr, func() {})
		var se *stream.StageError
		if !errors.Is(err, backpressure.ErrOverflow) || !errors.As(err, &se) || se.Stage != "buffer" {
			t.Fatalf("Run = %v, want ErrOverflow from stage buffer", err)
		}
	})
}

func TestBufferConfigErrors(t *testing.T) {
	for _, buf := range []*backpressure.Buffer[int]{
		backpressure.NewBuffer[int](0, backpressure.Block),
		backpressure.NewBuffer[int](10, backpressure.Overflow(9)),
	} {
		g := stream.New()
		s := stream.Via(stream.From(g, source.Slice([]int{1})), buf)
		stream.To(s, sink.Discard[int]())
		if err := g.Run(context.Background()); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("Run = %v, want ErrInvalid", err)
		}
	}
}

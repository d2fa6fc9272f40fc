package sink_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func value(i int) int { return i }

func TestDiscardContract(t *testing.T) {
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New:   func(*testing.T) stream.Sink[int] { return sink.Discard[int]() },
		Value: value,
	})
}

func TestCollectContract(t *testing.T) {
	var c *sink.Collector[int]
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New:       func(*testing.T) stream.Sink[int] { c = sink.Collect[int](); return c },
		Value:     value,
		Delivered: func(*testing.T) int { return len(c.Values()) },
	})
}

func TestFuncContract(t *testing.T) {
	var n atomic.Int64
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New: func(*testing.T) stream.Sink[int] {
			n.Store(0)
			return sink.Func(func(context.Context, int) error { n.Add(1); return nil })
		},
		Value:     value,
		Delivered: func(*testing.T) int { return int(n.Load()) },
	})
}

func TestGoStreamsContract(t *testing.T) {
	var n atomic.Int64
	var drained chan struct{}
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New: func(*testing.T) stream.Sink[int] {
			n.Store(0)
			ch := make(chan any)
			drained = make(chan struct{})
			go func() {
				defer close(drained)
				for range ch {
					n.Add(1)
				}
			}()
			return sink.GoStreams[int](extension.NewChanSink(ch))
		},
		Value: value,
		// The sink closes the channel when its input ends; the reader has
		// counted everything once it sees that.
		Delivered: func(*testing.T) int { <-drained; return int(n.Load()) },
	})
}

func TestDeadLetterFuncContract(t *testing.T) {
	var n atomic.Int64
	streamtest.TestSink(t, streamtest.SinkCase[stream.Failure]{
		New: func(*testing.T) stream.Sink[stream.Failure] {
			n.Store(0)
			return sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { n.Add(1); return nil })
		},
		Value:     func(i int) stream.Failure { return stream.Failure{Stage: "x", Err: errors.New("bad"), Value: i} },
		Delivered: func(*testing.T) int { return int(n.Load()) },
		Outcome:   stream.DeadLettered,
	})
}

func TestFuncErrorsAreDeadLetteredAndPanicsToo(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{0, 1, 2, 3}, source.Track(tr))), sink.Func(func(_ context.Context, x int) error {
		switch x {
		case 1:
			return errors.New("rejected")
		case 2:
			panic("sink bug")
		}
		return nil
	}))
	var reasons []string
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		reasons = append(reasons, m.Value.Error())
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := tr.Stats()
	if len(reasons) != 2 || st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("reasons %q, settled %+v", reasons, st.Settled)
	}
}

func TestDeadLetterThatCannotRecordEndsRunUnsettled(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{0, 1, 2}, source.Track(tr))), sink.Func(func(context.Context, int) error {
		return errors.New("rejected")
	}))
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
		return errors.New("dead-letter topic unreachable")
	}))
	err := g.Run(context.Background())
	if err == nil || tr.Stats().Settled[stream.DeadLettered] != 0 {
		t.Fatalf("Run = %v with %+v settled; want an error and nothing dead-lettered", err, tr.Stats().Settled)
	}
	t.Log(err)
}

// Failures kept by a Collector for inspection have left the pipeline as
// dead letters, not as completed work: the source's tracker, and the
// collector stage's own counts, must say DeadLettered.
func TestCollectOfFailuresSettlesDeadLettered(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([]int{0, 1, 2, 3}, source.Track(tr))), sink.Func(func(_ context.Context, x int) error {
		if x%2 == 1 {
			return errors.New("rejected")
		}
		return nil
	}))
	failures := sink.Collect[stream.Failure]()
	stream.To(g.Failures(), failures, stream.Name("failures"))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(failures.Values()); n != 2 {
		t.Fatalf("collected %d failures, want 2", n)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("tracker settled %+v; want 2 completed (the sink) and 2 dead-lettered (the collected failures)", st.Settled)
	}
	found := false
	for _, s := range g.Stats() {
		if s.Name != "failures" {
			continue
		}
		found = true
		if s.SettledBy[stream.DeadLettered] != 2 || s.SettledBy[stream.Completed] != 0 {
			t.Fatalf("failures stage settled %+v; want 2 dead-lettered", s.SettledBy)
		}
	}
	if !found {
		t.Fatal("no stage named failures in Graph.Stats")
	}
}

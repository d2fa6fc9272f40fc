package sink_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func value(i int) int { return i }

// The sinks that deliver somewhere deliver in the order they are given,
// to one destination: one partition.
var ordered = streamtest.Features{OrderedPerPartition: true}

// record keeps what a sink under test delivered, in order, for Written.
type record[T any] struct {
	mu sync.Mutex
	vs []T
}

func (r *record[T]) reset() { r.mu.Lock(); r.vs = nil; r.mu.Unlock() }

func (r *record[T]) add(v T) { r.mu.Lock(); r.vs = append(r.vs, v); r.mu.Unlock() }

func (r *record[T]) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.vs) }

func (r *record[T]) written() [][]T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return [][]T{append([]T(nil), r.vs...)}
}

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
		Features:  ordered,
		Index:     value,
		Written:   func(*testing.T) [][]int { return [][]int{c.Values()} },
	})
}

func TestFuncContract(t *testing.T) {
	var r record[int]
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New: func(*testing.T) stream.Sink[int] {
			r.reset()
			return sink.Func(func(_ context.Context, v int) error { r.add(v); return nil })
		},
		Value:     value,
		Delivered: func(*testing.T) int { return r.count() },
		Features:  ordered,
		Index:     value,
		Written:   func(*testing.T) [][]int { return r.written() },
	})
}

func TestGoStreamsContract(t *testing.T) {
	// The latest New's reader and what it kept; each reader has its own,
	// since nothing waits for the reader of a subtest that does not look.
	var r *record[int]
	var drained chan struct{}
	streamtest.TestSink(t, streamtest.SinkCase[int]{
		New: func(*testing.T) stream.Sink[int] {
			ch := make(chan any)
			kept, done := &record[int]{}, make(chan struct{})
			r, drained = kept, done
			go func() {
				defer close(done)
				for v := range ch {
					kept.add(v.(int))
				}
			}()
			return sink.GoStreams[int](extension.NewChanSink(ch))
		},
		Value: value,
		// The sink closes the channel when its input ends; the reader has
		// kept everything once it sees that.
		Delivered: func(*testing.T) int { <-drained; return r.count() },
		Features:  ordered,
		Index:     value,
		Written:   func(*testing.T) [][]int { <-drained; return r.written() },
	})
}

func TestDeadLetterFuncContract(t *testing.T) {
	var r record[stream.Failure]
	streamtest.TestSink(t, streamtest.SinkCase[stream.Failure]{
		New: func(*testing.T) stream.Sink[stream.Failure] {
			r.reset()
			return sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error { r.add(m.Value); return nil })
		},
		Value:     func(i int) stream.Failure { return stream.Failure{Stage: "x", Err: errors.New("bad"), Value: i} },
		Delivered: func(*testing.T) int { return r.count() },
		Outcome:   stream.DeadLettered,
		Features:  ordered,
		Index:     func(f stream.Failure) int { return f.Value.(int) },
		Written:   func(*testing.T) [][]stream.Failure { return r.written() },
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

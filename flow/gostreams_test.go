package flow_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	streams "github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// ledger is a stream.Settler that keeps, per input id, the outcomes the id
// was settled with, so that a sink can ask whether an input is settled
// already. A stream.Tracker only tells how many are.
type ledger struct {
	mu  sync.Mutex
	got map[int64][]stream.Outcome
}

func newLedger() *ledger { return &ledger{got: map[int64][]stream.Outcome{}} }

func (l *ledger) Settle(id int64, o stream.Outcome) {
	l.mu.Lock()
	l.got[id] = append(l.got[id], o)
	l.mu.Unlock()
}

func (l *ledger) settled(id int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got[int64(id)]) > 0
}

// check fails t unless exactly the ids in want were settled, each once and
// as completed.
func (l *ledger) check(t *testing.T, want []int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var bad []int
	for _, id := range want {
		if os := l.got[int64(id)]; len(os) != 1 || os[0] != stream.Completed {
			bad = append(bad, id)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d ids not settled exactly once as completed, first %v: %v",
			len(bad), bad[0], l.got[int64(bad[0])])
	}
	if len(l.got) != len(want) {
		t.Errorf("%d ids settled, want %d", len(l.got), len(want))
	}
}

// idSource emits the ids received from ch, each with a handle from l that
// settles that id. Like source.Channel it hands on what it has whenever ch
// is momentarily empty, so that windows see inputs as they are sent.
func idSource(l *ledger, ch <-chan int) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for {
			var (
				id int
				ok bool
			)
			select {
			case id, ok = <-ch:
			default:
				if err := out.Flush(ctx); err != nil {
					return err
				}
				select {
				case id, ok = <-ch:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if !ok {
				return nil
			}
			if err := out.Send(ctx, stream.NewMessage(id, stream.NewHandle(l, int64(id)))); err != nil {
				return err
			}
		}
	})
}

// bridged sends the ids 0, 1, ... (one per call of send in feed) through
// GoStreams(f) into a sink that checks, for every output, that none of the
// inputs it was computed from (inputs(v)) is settled yet. At the end every
// id must have reached the sink, in order, and been settled exactly once.
func bridged[Out any](t *testing.T, f streams.Flow, inputs func(Out) []int, feed func(send func()), opts ...stream.Option) {
	t.Helper()
	l := newLedger()
	ch := make(chan int)
	g := stream.New(opts...)
	s := stream.Via(stream.From(g, idSource(l, ch)), flow.GoStreams[int, Out](f))
	var got, early []int
	stream.To(s, sink.Func(func(_ context.Context, v Out) error {
		for _, id := range inputs(v) {
			if l.settled(id) {
				early = append(early, id)
			}
			got = append(got, id)
		}
		return nil
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	var (
		n      int
		ended  bool // Run returned before the end of input: it failed
		runErr error
	)
	feed(func() {
		if ended {
			return
		}
		select {
		case ch <- n:
			n++
		case runErr = <-done:
			ended = true
		}
	})
	if !ended {
		close(ch)
		runErr = <-done
	}
	if runErr != nil || ended {
		t.Fatalf("Run = %v after %d inputs", runErr, n)
	}
	if len(early) > 0 {
		t.Errorf("%d of %d inputs were settled before the output computed from them reached the sink, first ids %v",
			len(early), n, early[:min(len(early), 10)])
	}
	if !slices.Equal(got, ints(n)) {
		t.Errorf("outputs hold %d ids, want 0..%d in order", len(got), n-1)
	}
	l.check(t, ints(n))
}

func window(w []int) []int { return w }
func single(v int) []int   { return []int{v} }

// feedN sends n inputs at once.
func feedN(n int) func(send func()) {
	return func(send func()) {
		for range n {
			send()
		}
	}
}

// feedBursts sends bursts of size inputs, pause apart (fake time inside a
// synctest bubble).
func feedBursts(bursts, size int, pause time.Duration) func(send func()) {
	return func(send func()) {
		for range bursts {
			for range size {
				send()
			}
			time.Sleep(pause)
		}
	}
}

func TestGoStreamsWindowsSettleInputsAfterTheirWindow(t *testing.T) {
	t.Run("TumblingWindow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Bursts arrive as the window closes: an input can land in the
			// next window while the previous one is being emitted.
			bridged(t, gsflow.NewTumblingWindow[int](time.Second), window, feedBursts(5, 10, time.Second))
		})
	})
	t.Run("SessionWindow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			bridged(t, gsflow.NewSessionWindow[int](500*time.Millisecond), window, feedBursts(5, 10, time.Second))
		})
	})
	t.Run("Batch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Full batches of 7, then the rest of each burst on the timer.
			bridged(t, gsflow.NewBatch[int](7, 500*time.Millisecond), window, feedBursts(5, 10, time.Second))
		})
	})
}

func TestGoStreamsOneToOneSettlesInputAfterItsOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go-streams flows in real time: make test runs it, -short does not")
	}
	// Pipes of one message make the bridge hand on each output alone, so
	// that an input settled with the previous output is caught at the sink.
	small := []stream.Option{stream.WithCapacity(1), stream.WithBatchSize(1)}
	t.Run("PassThrough many", func(t *testing.T) {
		bridged(t, gsflow.NewPassThrough(), single, feedN(20_000), small...)
	})
	t.Run("PassThrough", func(t *testing.T) {
		bridged(t, gsflow.NewPassThrough(), single, feedN(2000), small...)
	})
	t.Run("PassThrough default pipes", func(t *testing.T) {
		bridged(t, gsflow.NewPassThrough(), single, feedN(20_000))
	})
}

// A Throttler only throttles in the goroutine its Via or To starts, which
// also ends its quota timer: read straight from Out it would pass
// everything at once and leave that timer running.
func TestGoStreamsThrottlerBackpressureThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		bridged(t, gsflow.NewThrottler(100, time.Second, 10, gsflow.Backpressure), single, feedN(300))
		// 300 at 100 a second: at least two quota periods of fake time.
		if el := time.Since(start); el < 2*time.Second {
			t.Fatalf("300 elements passed in %v of fake time: not throttled to 100/s", el)
		}
	})
}

// After a stage fails, only the inputs of outputs that completed are
// settled: the others are replayed, none is settled as filtered.
func TestGoStreamsAfterErrorOnlyCompletedOutputsSettle(t *testing.T) {
	l := newLedger()
	ch := make(chan int, 1000)
	for i := range 1000 {
		ch <- i
	}
	close(ch)
	g := stream.New(stream.WithCapacity(1), stream.WithBatchSize(1))
	s := stream.Via(stream.From(g, idSource(l, ch)), flow.GoStreams[int, int](gsflow.NewPassThrough()))
	var completed []int
	stream.To(s, sink.Func(func(_ context.Context, v int) error {
		if v == 500 {
			return stream.Fatal(errors.New("sink gives up"))
		}
		completed = append(completed, v)
		return nil
	}))
	if err := g.Run(context.Background()); !stream.IsFatal(err) {
		t.Fatalf("Run = %v, want the sink's fatal error", err)
	}
	l.check(t, completed)
}

func TestGoStreamsTumblingWindowInsidePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ch := make(chan int)
		g := stream.New()
		s := stream.From(g, source.Channel(ch, source.Track(tr)))
		windows := stream.Via(s, flow.GoStreams[int, []int](gsflow.NewTumblingWindow[int](time.Second)))
		sums := stream.Via(windows, flow.Map(func(w []int) (int, error) {
			sum := 0
			for _, v := range w {
				sum += v
			}
			return sum, nil
		}))
		out := sink.Collect[int]()
		stream.To(sums, out)
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		for sec := range 3 {
			for i := range 10 {
				ch <- sec*10 + i
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, v := range out.Values() {
			total += v
		}
		if total != 29*30/2 {
			t.Fatalf("window sums add to %d, want %d (values %v)", total, 29*30/2, out.Values())
		}
		checkSettled(t, tr)
	})
}

func TestGoStreamsWrongOutputTypeIsFatal(t *testing.T) {
	g := stream.New()
	s := stream.From(g, source.Slice(ints(10)))
	bad := stream.Via(s, flow.GoStreams[int, string](gsflow.NewPassThrough()), stream.Name("bridge"))
	stream.To(bad, sink.Discard[string]())
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "bridge" || !stream.IsFatal(err) {
		t.Fatalf("Run = %v, want a fatal StageError from bridge", err)
	}
}

// A source that has sent its backlog waits for more, as a Kafka source does:
// the wrong output type must still end the pipeline, not leave the bridge
// draining its input while the error waits for an end of input that never
// comes.
func TestGoStreamsWrongOutputTypeEndsAnEndlessPipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 1000 {
				if err := out.Send(ctx, stream.NewMessage(i, stream.Handle{})); err != nil {
					return err
				}
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			<-ctx.Done() // no more for now
			return ctx.Err()
		})
		g := stream.New()
		bad := stream.Via(stream.From(g, src), flow.GoStreams[int, string](gsflow.NewPassThrough()))
		stream.To(bad, sink.Discard[string]())
		if err := g.Run(context.Background()); !stream.IsFatal(err) {
			t.Fatalf("Run = %v, want the bridge's fatal error", err)
		}
	})
}

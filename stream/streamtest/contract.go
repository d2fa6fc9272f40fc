package streamtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/stream"
)

// SourceCase describes a source under test.
type SourceCase[T any] struct {
	// New returns a fresh source that emits n messages: exactly n and then
	// ends if Bounded, at least n and then more until cancelled otherwise.
	New func(t *testing.T, n int) stream.Source[T]
	// Bounded says whether the source ends by itself after n messages.
	Bounded bool
	// Tracker, if set, returns the tracker whose handles the source of the
	// latest New call gives its messages, so the suite can check that each
	// one is settled exactly once.
	Tracker func() *stream.Tracker
	// Features declares what the source promises beyond the base
	// contract; each one declared adds its check (none by default).
	Features Features
	// Index returns the index of a value the case produced: New(t, n)
	// emits the indexes 0 to n-1 (and, unbounded, more after them).
	// Required by every feature.
	Index func(v T) int
	// Restart returns a fresh topic and group for one check that restarts
	// the source or its server. Required by ReplayAfterRestart,
	// RedeliversUnsettled and ReconnectsAfterServerRestart.
	Restart func(t *testing.T) RestartCase[T]
}

// TestSource runs the source contract, and the check of each feature
// declared in c.Features.
func TestSource[T any](t *testing.T, c SourceCase[T]) {
	const n = 2000
	f := c.Features
	if f != (Features{}) && c.Index == nil {
		t.Fatal("SourceCase declares features but no Index: the checks cannot tell the messages apart")
	}
	if f.restarts() && c.Restart == nil {
		t.Fatal("SourceCase declares a feature that restarts the source but no Restart to set one up")
	}
	t.Run("emits and settles each message once", func(t *testing.T) {
		noLeaks(t)
		var got atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := stream.New()
		stream.To(stream.From(g, c.New(t, n)), stream.SinkFunc[T](func(ctx context.Context, in *stream.Inlet[T]) error {
			return drain(ctx, in, func(m *stream.Message[T]) {
				in.Settle(m, stream.Completed)
				if got.Add(1) == n && !c.Bounded {
					cancel()
				}
			})
		}))
		if err := g.Run(ctx); err != nil {
			t.Fatalf("Run = %v", err)
		}
		if c.Bounded && got.Load() != n {
			t.Fatalf("received %d messages, want %d", got.Load(), n)
		}
		if got.Load() < n {
			t.Fatalf("received %d messages, want at least %d", got.Load(), n)
		}
		checkTracker(t, c.Tracker, got.Load())
	})
	t.Run("cancel stops it and drains", func(t *testing.T) {
		noLeaks(t)
		var got atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := stream.New(stream.WithDrainTimeout(10 * time.Second))
		stream.To(stream.From(g, c.New(t, n)), stream.SinkFunc[T](func(ctx context.Context, in *stream.Inlet[T]) error {
			return drain(ctx, in, func(m *stream.Message[T]) {
				in.Settle(m, stream.Completed)
				if got.Add(1) == n/2 {
					cancel()
				}
			})
		}))
		if err := g.Run(ctx); err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
		checkTracker(t, c.Tracker, got.Load())
	})
	t.Run("a failing sink ends the run", func(t *testing.T) {
		noLeaks(t)
		g := stream.New()
		boom := errors.New("sink failed")
		stream.To(stream.From(g, c.New(t, n)), stream.SinkFunc[T](func(ctx context.Context, in *stream.Inlet[T]) error {
			_, err := in.Recv(ctx)
			if err != nil {
				return err
			}
			return boom
		}), stream.Name("failing"))
		err := g.Run(context.Background())
		var se *stream.StageError
		if !errors.Is(err, boom) || !errors.As(err, &se) || se.Stage != "failing" {
			t.Fatalf("Run = %v, want the sink's error with its name", err)
		}
	})
	if f.OrderedPerPartition {
		t.Run("keeps the order of each partition", func(t *testing.T) { sourceOrder(t, c, n) })
	}
	if f.ReplayAfterRestart {
		t.Run("a new instance resumes from the last commit", func(t *testing.T) { replayAfterRestart(t, c) })
	}
	if f.RedeliversUnsettled {
		t.Run("a new instance gets what was never settled", func(t *testing.T) { redeliversUnsettled(t, c) })
	}
	if f.ReconnectsAfterServerRestart {
		t.Run("resumes when its server restarts", func(t *testing.T) { reconnects(t, c) })
	}
}

// SinkCase describes a sink under test.
type SinkCase[T any] struct {
	// New returns a fresh sink.
	New func(t *testing.T) stream.Sink[T]
	// Value returns the i-th value to send.
	Value func(i int) T
	// Delivered, if set, returns how many values the sink of the latest New
	// call has delivered to its destination.
	Delivered func(t *testing.T) int
	// Outcome is how the sink settles what it processed (default
	// stream.Completed; dead letters use stream.DeadLettered).
	Outcome stream.Outcome
	// Features declares what the sink promises beyond the base contract:
	// of them, a sink can have only OrderedPerPartition (none by default).
	Features Features
	// Index returns i for Value(i). Required by OrderedPerPartition.
	Index func(v T) int
	// Written returns what the sink of the latest New call delivered, as
	// its destination holds it: one slice per partition, each in the
	// partition's order. Required by OrderedPerPartition.
	Written func(t *testing.T) [][]T
}

// TestSink runs the sink contract, and the check of each feature declared
// in c.Features.
func TestSink[T any](t *testing.T, c SinkCase[T]) {
	const n = 2000
	if names := c.Features.sourceOnly(); names != "" {
		t.Fatalf("SinkCase declares %s: features of sources, which TestSink cannot check", names)
	}
	if c.Features.OrderedPerPartition && (c.Index == nil || c.Written == nil) {
		t.Fatal("SinkCase declares OrderedPerPartition without Index and Written to read back what it delivered")
	}
	values := func(k int) []T {
		vs := make([]T, k)
		for i := range vs {
			vs[i] = c.Value(i)
		}
		return vs
	}
	outcome := c.Outcome
	if outcome == 0 {
		outcome = stream.Completed
	}
	t.Run("settles each message once", func(t *testing.T) {
		noLeaks(t)
		tr := stream.NewTracker(0)
		g := stream.New()
		stream.To(stream.From(g, sliceSource(values(n), tr)), c.New(t), stream.Name(sinkStage))
		if err := g.Run(context.Background()); err != nil {
			t.Fatalf("Run = %v", err)
		}
		st := tr.Stats()
		if st.Settled[outcome] != n || st.Duplicates != 0 || tr.Watermark() != n {
			t.Fatalf("settled %+v, watermark %d; want %d settled %v once each", st, tr.Watermark(), n, outcome)
		}
		if err := counted(g, n, outcome); err != nil {
			t.Fatalf("after Run: %v", err)
		}
		if c.Delivered != nil {
			if d := c.Delivered(t); d != n {
				t.Fatalf("delivered %d, want %d", d, n)
			}
		}
	})
	t.Run("cancel drains what was taken", func(t *testing.T) {
		noLeaks(t)
		tr := stream.NewTracker(0)
		ch := make(chan T)
		ctx, cancel := context.WithCancel(context.Background())
		g := stream.New()
		stream.To(stream.From(g, chanSource(ch, tr)), c.New(t), stream.Name(sinkStage))
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		for _, v := range values(n / 2) {
			ch <- v
		}
		// Idle, with everything settled, the sink's stage holds nothing:
		// what a live status page shows while a worker waits for input.
		idle := waitFor(func() error {
			if settled := tr.Stats().Total(); settled != n/2 {
				return fmt.Errorf("%d of %d messages settled", settled, n/2)
			}
			return counted(g, n/2, outcome)
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
		if idle != nil {
			t.Fatalf("idle with every message settled: %v", idle)
		}
		if st := tr.Stats(); st.Total() != n/2 || st.Duplicates != 0 {
			t.Fatalf("after drain %+v, want all %d settled once", st, n/2)
		}
	})
	t.Run("empty input", func(t *testing.T) {
		noLeaks(t)
		g := stream.New()
		stream.To(stream.From(g, sliceSource[T](nil, stream.NewTracker(0))), c.New(t))
		if err := g.Run(context.Background()); err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
	if c.Features.OrderedPerPartition {
		t.Run("keeps the order of each partition", func(t *testing.T) { sinkOrder(t, c, values(n)) })
	}
}

// sinkStage names the sink's stage in the suite's pipelines.
const sinkStage = "sink-under-test"

// counted reports whether the sink's stage counts the n messages it
// received as settled with outcome o, holding none in flight.
func counted(g *stream.Graph, n int64, o stream.Outcome) error {
	for _, s := range g.Stats() {
		if s.Name != sinkStage {
			continue
		}
		if s.In != n || s.Settled != n || s.SettledBy[o] != n || s.InFlight() != 0 {
			return fmt.Errorf("the sink's stage: in %d, settled %d (%d %v), in flight %d; want %d in, all settled %v",
				s.In, s.Settled, s.SettledBy[o], o, s.InFlight(), n, o)
		}
		return nil
	}
	return fmt.Errorf("no stage %q", sinkStage)
}

// waitFor waits until check, which other goroutines make pass, returns
// nil, for 20 s at most; then it returns check's last error.
func waitFor(check func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

func checkTracker(t *testing.T, tracker func() *stream.Tracker, received int64) {
	t.Helper()
	if tracker == nil {
		return
	}
	tr := tracker()
	st := tr.Stats()
	if st.Duplicates != 0 {
		t.Fatalf("%d messages settled twice", st.Duplicates)
	}
	if st.Settled[stream.Completed] != received {
		t.Fatalf("%d settled as completed, %d received", st.Settled[stream.Completed], received)
	}
	if tr.Watermark() != received {
		t.Fatalf("watermark %d after %d contiguous settles", tr.Watermark(), received)
	}
}

func drain[T any](ctx context.Context, in *stream.Inlet[T], fn func(m *stream.Message[T])) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for i := range b.Items {
			fn(&b.Items[i])
		}
		b.Release()
	}
}

// The suite does not import source/ (which tests itself with this suite):
// it has its own two minimal sources.
func sliceSource[T any](vs []T, tr *stream.Tracker) stream.Source[T] {
	return stream.SourceFunc[T](func(ctx context.Context, out *stream.Outlet[T]) error {
		for _, v := range vs {
			if err := out.Send(ctx, stream.NewMessage(v, tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
}

func chanSource[T any](ch <-chan T, tr *stream.Tracker) stream.Source[T] {
	return stream.SourceFunc[T](func(ctx context.Context, out *stream.Outlet[T]) error {
		for {
			select {
			case v := <-ch:
				if err := out.Send(ctx, stream.NewMessage(v, tr.Track())); err != nil {
					return err
				}
				if err := out.Flush(ctx); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
}

// noLeaks checks for leaked goroutines after the test and all its cleanups
// (registered first, it runs last): stages whose resources the test closes
// in t.Cleanup are checked after they are closed.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

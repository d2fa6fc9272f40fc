package flow_test

import (
	"context"
	"maps"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// A Delay behind a backpressure.PartitionLimit lets go of a message of an
// assignment that ended without settling it: the PartitionLimit must not
// go on counting it against the partition, or the partition, given back
// to this reader, waits for ever behind a message nobody will settle.
func TestPartitionLimitIsNotWedgedByADelayThatLetsGoOfAnEndedAssignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		old, again := newAssignment(0), newAssignment(0)
		src := takenAwayAndGivenBack(start, old, again)
		at := map[int]time.Duration{}
		g := stream.New()
		limited := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[int](1, 0))
		s := stream.Via(limited, flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp }))
		stream.To(s, sink.Func(func(_ context.Context, v int) error { at[v] = time.Since(start); return nil }))
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err := g.Run(ctx)
		if want := map[int]time.Duration{2: 2 * time.Second}; err != nil || !maps.Equal(at, want) {
			t.Fatalf("handed on at %v (Run: %v), want %v: the new assignment's message at once", at, err, want)
		}
		if st := again.Stats(); st.Total() != 1 {
			t.Fatalf("the new assignment's message was not settled: %+v", st)
		}
	})
}

// As a Delay, a window behind a PartitionLimit lets go of the open windows
// of an assignment that ended, unsettled: the partition, given back, is
// not held by PartitionLimit behind them.
func TestPartitionLimitIsNotWedgedByAWindowThatLetsGoOfAnEndedAssignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old, again := newAssignment(0), newAssignment(10)
		src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
			if err := out.Send(ctx, old.message(0, reading{"a", at(0, 0), 1})); err != nil {
				return err
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			time.Sleep(time.Second)
			close(old.ended) // the partition is taken away...
			time.Sleep(time.Second)
			return out.Send(ctx, again.message(10, reading{"a", at(0, 40), 1})) // ... and given back
		})
		g := stream.New()
		out := &windowSink{}
		limited := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[reading](1, 0))
		stream.To(stream.Via(limited, sumWindow()), out)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err := g.Run(ctx)
		if ws := out.windows(); err != nil || len(ws) != 1 || ws[0].FirstOffset != 10 || again.Stats().Total() != 1 {
			t.Fatalf("Run: %v; windows %+v, want the new assignment's reading alone, settled", err, ws)
		}
		if st := old.Stats(); st.Total() != 0 {
			t.Fatalf("the old assignment's message was settled: %+v", st)
		}
	})
}

// Asked to stop, a Delay behind a PartitionLimit lets go of what is not
// due, unsettled; the messages PartitionLimit still holds for that
// partition must not keep the pipeline from stopping until the drain
// timeout: they are left unsettled too, replayed later.
func TestPartitionLimitLetsTheDrainEndBehindADelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := stream.NewTracker(0)
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for v := range 3 {
				m := stream.NewMessage(v, tr.Track())
				m.Topic, m.Timestamp = "retry", start.Add(time.Minute)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		})
		g := stream.New()
		limited := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[int](1, 0))
		s := stream.Via(limited, flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp }))
		stream.To(s, sink.Func(func(context.Context, int) error { return nil }))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := g.Run(ctx); err != nil {
			t.Fatalf("Run = %v, want a drain that ends, the messages left unsettled", err)
		}
		if st := tr.Stats(); st.Total() != 0 {
			t.Fatalf("settled %+v, want none", st)
		}
	})
}

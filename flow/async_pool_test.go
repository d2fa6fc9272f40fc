package flow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// heldSource sends n messages (tracked by tr if not nil) and then holds
// the stage open until ctx ends.
func heldSource(n int, tr *stream.Tracker) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for i := range n {
			h := stream.Handle{}
			if tr != nil {
				h = tr.Track()
			}
			m := stream.NewMessage(i, h)
			m.Key = []byte(fmt.Sprint(i % 7))
			m.Partition = int32(i % 3)
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
}

// An idle stage reports no call running and nothing waiting.
func TestMapAsyncStatsZeroWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got atomic.Int64
		a := flow.MapAsync(4, func(ctx context.Context, x int) (int, error) {
			time.Sleep(time.Millisecond)
			return x, nil
		})
		g := stream.New()
		stream.To(stream.Via(stream.From(g, heldSource(20, nil)), a),
			sink.Func(func(context.Context, int) error { got.Add(1); return nil }))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		st := a.Stats()
		cancel()
		<-done
		if got.Load() != 20 || st.InFlight != 0 || st.Waiting != 0 {
			t.Fatalf("%d results; idle stage's stats %+v, want InFlight 0 and Waiting 0", got.Load(), st)
		}
	})
}

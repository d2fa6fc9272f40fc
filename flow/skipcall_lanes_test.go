package flow_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// valuesAt0 sends vs, all at level 0.
func valuesAt0(vs []int) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for _, v := range vs {
			m := stream.NewMessage(v, stream.Handle{})
			m.Priority = 0
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// A message SkipCall answers makes no call: the lanes must not count it
// as a call started (LaneStats.Started: "messages whose first call
// started"), nor let its zero running time into the mean call time that
// sizes the backlog's drain (DesiredWorkers). A replay storm that skips
// most of its steps would otherwise tell an autoscaler that a level's
// backlog of real calls drains several times faster than it does.
//
// Level 0 gets 4 calls of 1 s, then 20 messages that need no call, then
// 20 calls more, at parallelism 2. At 2.5 s the window since 0.5 s saw 4
// calls end (4 s busy over 2 s: 2 slots), and 18 calls wait, which
// drain in 2 s at 1 s each with 9 more: 11 desired workers. The same
// stage without SkipCall's messages (the control) says 11.
func TestSkipCallLeavesTheLanesEstimatesToTheCalls(t *testing.T) {
	for _, skips := range []bool{false, true} {
		name := "control: no message skipped"
		if skips {
			name = "20 messages skipped"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var vs []int
				for i := range 4 {
					vs = append(vs, i)
				}
				if skips {
					for i := range 20 {
						vs = append(vs, -1-i) // negative: needs no call
					}
				}
				for i := range 20 {
					vs = append(vs, 100+i)
				}
				a := flow.MapAsync(2, func(_ context.Context, v int) (int, error) {
					time.Sleep(time.Second)
					return v, nil
				}, flow.Window(64), flow.Lanes(backpressure.StrictPriority(3)), flow.LaneScaling(2*time.Second, nil),
					flow.SkipCall(func(v int) (int, bool) { return v, v < 0 }))
				g := stream.New()
				stream.To(stream.Via(stream.From(g, valuesAt0(vs)), a), sink.Discard[int]())
				done := make(chan error)
				go func() { done <- g.Run(context.Background()) }()
				at := func(d time.Duration) []flow.LaneStats {
					time.Sleep(d)
					synctest.Wait()
					return a.Stats().Levels
				}
				at(500 * time.Millisecond)
				st := at(2 * time.Second)
				if st[0].InFlight != 2 || st[0].Waiting != 18 || st[0].DesiredWorkers != 11 {
					t.Errorf("at 2.5 s: %+v; want 2 calls running, 18 waiting, 11 desired workers", st[0])
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				st = a.Stats().Levels
				if st[0].Started != 24 || st[0].Busy != 24*time.Second || st[0].InFlight != 0 || st[0].Waiting != 0 {
					t.Errorf("at the end: %+v; want 24 calls started, 24 s busy, nothing in flight or waiting", st[0])
				}
				if want := int64(len(vs)); st[0].Done != want {
					t.Errorf("at the end: %d done, want %d (every message's outcome left)", st[0].Done, want)
				}
			})
		})
	}
}

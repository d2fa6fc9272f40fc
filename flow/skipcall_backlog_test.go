package flow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// Messages SkipCall answers that wait in a level's queue are no backlog
// of calls: DesiredWorkers ("the parallelism the level would need to ...
// drain its backlog") must not count them at the level's mean call time.
// SkipCall runs as a message enters the stage precisely so that the lanes
// know it needs no call.
//
// Level 0 gets 8 calls of 1 s, then 20 messages that need no call, at
// parallelism 2 and a drain time of 2 s. At 2.5 s the window since 0.5 s
// saw 4 calls end (2 slots busy); 2 calls wait (1 s each: 1 slot more to
// drain them in 2 s), and the 20 skipped messages behind them take no
// time: 3 desired workers, as the control (the 8 calls alone) says.
func TestSkipCallWaitingMessagesAreNoBacklogOfCalls(t *testing.T) {
	desired := map[bool]int64{}
	for _, skips := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var vs []int
			for i := range 8 {
				vs = append(vs, i)
			}
			if skips {
				for i := range 20 {
					vs = append(vs, -1-i) // negative: needs no call
				}
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
			desired[skips] = st[0].DesiredWorkers
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
	if desired[false] != 3 {
		t.Fatalf("control: %d desired workers at 2.5 s, want 3", desired[false])
	}
	if desired[true] != desired[false] {
		t.Errorf("with 20 skipped messages waiting: %d desired workers, want %d as without them", desired[true], desired[false])
	}
}

// A stage stopped while calls run and messages wait, some of them
// answered by SkipCall: its lanes hold nothing once its run returned,
// the calls cut are the calls started, and no skipped message counts as
// one.
func TestSkipCallLanesAfterAStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var vs []int
		for i := range 4 {
			vs = append(vs, i, -1-i) // a call, then a message that needs no call
		}
		var entered atomic.Int64
		a := flow.MapAsync(2, func(ctx context.Context, v int) (int, error) {
			entered.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		}, flow.Window(64), flow.Lanes(backpressure.StrictPriority(3)), flow.LaneScaling(2*time.Second, nil),
			flow.SkipCall(func(v int) (int, bool) { return v, v < 0 }))
		g := stream.New()
		stream.To(stream.Via(stream.From(g, valuesAt0(vs)), a), sink.Discard[int]())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		st := a.Stats().Levels[0]
		// In order 0, -1, 1, -2, ... at parallelism 2: call 0 runs, -1 is
		// answered, call 1 runs; the rest wait.
		if st.Started != 2 || st.InFlight != 2 || st.Waiting != 5 {
			t.Fatalf("before the stop: %+v, want 2 calls started and running, 5 messages waiting", st)
		}
		cancel()
		<-done
		st = a.Stats().Levels[0]
		if st.Waiting != 0 || st.InFlight != 0 || st.Started != entered.Load() || a.Stats().InFlight != 0 || a.Stats().Waiting != 0 {
			t.Errorf("after the stop: %+v (stage %+v), want nothing waiting or in flight, %d calls started", st, a.Stats(), entered.Load())
		}
	})
}

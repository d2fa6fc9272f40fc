package flow_test

import (
	"context"
	"log/slog"
	"slices"
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
			sts, _ := skipLanes(t, vs, 500*time.Millisecond, 2500*time.Millisecond) // the estimate's window from 0.5 s
			desired[skips] = sts[1][0].DesiredWorkers
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
		// In order 0, -1, 1, -2, ... at parallelism 2: calls 0 and 1 run,
		// 2 and 3 wait, and -1 to -4, which need no slot, are out.
		if st.Started != 2 || st.InFlight != 2 || st.Waiting != 2 || st.Done != 4 {
			t.Fatalf("before the stop: %+v, want 2 calls started and running, 2 waiting, the 4 skipped done", st)
		}
		cancel()
		<-done
		st = a.Stats().Levels[0]
		if st.Waiting != 0 || st.InFlight != 0 || st.Started != entered.Load() || a.Stats().InFlight != 0 || a.Stats().Waiting != 0 {
			t.Errorf("after the stop: %+v (stage %+v), want nothing waiting or in flight, %d calls started", st, a.Stats(), entered.Load())
		}
	})
}

// In input order (InOrder), with a window smaller than the input, where
// SkipCall panics for some messages and answers others: the messages
// that panicked fail, every other leaves in input order, and the reorder
// buffer is not left waiting for a place the failed ones never took.
func TestSkipCallPanicsInOrderKeepTheOthersInOrder(t *testing.T) {
	a := flow.MapAsync(4, func(_ context.Context, x int) (int, error) {
		time.Sleep(time.Duration(x%3) * time.Millisecond) // calls end out of order
		return x, nil
	}, flow.InOrder(), flow.Window(8), flow.Lanes(backpressure.StrictPriority(2)),
		flow.SkipCall(func(x int) (int, bool) {
			if x%10 == 3 {
				panic("bad skip")
			}
			return x, x%4 == 0
		}))
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, valuesAt0(ints(200))), a), out)
	panics := countPanics(g, nil)
	run(t, g)
	var want []int
	for x := range 200 {
		if x%10 != 3 {
			want = append(want, x)
		}
	}
	if got := out.Values(); !slices.Equal(got, want) || panics.Load() != 20 {
		t.Fatalf("got %v and %d panics failed, want %v and 20", got, panics.Load(), want)
	}
	if st := a.Stats(); st.Skipped != 50 || st.Calls != 130 || st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v: want 50 skipped, 130 calls, nothing held", st)
	}
}

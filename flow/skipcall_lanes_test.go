package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
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
				sts, a := skipLanes(t, vs, 500*time.Millisecond, 2500*time.Millisecond) // the estimate's window from 0.5 s
				if st := sts[1]; st[0].InFlight != 2 || st[0].Waiting != 18 || st[0].DesiredWorkers != 11 {
					t.Errorf("at 2.5 s: %+v; want 2 calls running, 18 waiting, 11 desired workers", st[0])
				}
				st := a.Stats().Levels
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

// A stage keyed by message (the delivery scheduler's drone step is keyed
// by request), or in input order, with lanes and retries, where some
// messages need no call and others fail once transiently: every message
// leaves, each key's (or every) message in input order, each key's calls
// one at a time and in order, and the stage holds nothing once its input
// ends.
func TestSkipCallKeyedInOrderWithRetriesAndLanes(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		name := "keyed"
		if !keyed {
			name = "in order"
		}
		t.Run(name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { skipCallOrder(t, keyed) }) })
	}
}

func skipCallOrder(t *testing.T, keyed bool) {
	const n = 300
	var mu sync.Mutex
	running := map[int]bool{} // keys with a call running
	lastCalled := map[int]int{}
	var overlap, disorder int
	failed := map[int]bool{}
	call := func(_ context.Context, v int) (int, error) {
		k := v % 7
		mu.Lock()
		if keyed && running[k] {
			overlap++
		}
		if last, ok := lastCalled[k]; keyed && ok && last > v {
			disorder++
		}
		lastCalled[k] = v
		running[k] = true
		retry := v%5 == 0 && !failed[v]
		failed[v] = true
		mu.Unlock()
		time.Sleep(time.Duration(1+v%4) * time.Millisecond)
		mu.Lock()
		running[k] = false
		mu.Unlock()
		if retry {
			return 0, stream.Transient(errors.New("once"))
		}
		return v, nil
	}
	opts := []flow.AsyncOption{flow.Lanes(backpressure.StrictPriority(3)),
		flow.Retry(flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.NoJitter, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}),
		flow.SkipCall(func(v int) (int, bool) { return -v - 1, v%3 == 0 })}
	var a *flow.Async[int, int]
	if keyed {
		a = flow.MapAsyncByKey(8, func(m *stream.Message[int]) string { return strconv.Itoa(m.Value % 7) }, call, opts...)
	} else {
		a = flow.MapAsync(8, call, append(opts, flow.InOrder())...)
	}
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for v := range n {
			m := stream.NewMessage(v, stream.Handle{})
			m.Priority = uint8(v % 3)
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, src), a), out)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.Values()
	if len(got) != n {
		t.Fatalf("%d messages out of %d", len(got), n)
	}
	last := map[int]int{}
	for i, r := range got {
		v := r
		if r < 0 {
			v = -r - 1
			if v%3 != 0 {
				t.Fatalf("%d left with SkipCall's result: it needed a call", v)
			}
		} else if v%3 == 0 {
			t.Fatalf("%d was called: it needed none", v)
		}
		k := v % 7
		if !keyed {
			k = 0
			if v != i {
				t.Fatalf("message %d left at %d: want input order", v, i)
			}
		}
		if l, ok := last[k]; ok && l > v {
			t.Fatalf("%d left after %d of its key: want the key's input order", v, l)
		}
		last[k] = v
	}
	st := a.Stats()
	if overlap != 0 || disorder != 0 || st.Skipped != n/3 || st.InFlight != 0 || st.Delayed != 0 || st.Waiting != 0 {
		t.Fatalf("%d overlapping calls of a key, %d out of key order; stats %+v: want none, %d skipped, nothing held", overlap, disorder, st, n/3)
	}
	for lv, l := range st.Levels {
		if l.InFlight != 0 || l.Waiting != 0 || l.Done != n/3 {
			t.Errorf("level %d after the run: %+v, want nothing in flight or waiting, %d done", lv, l, n/3)
		}
	}
}

// A panic in SkipCall's function, in a stage keyed by message, fails its
// message and lets the next message of its key go: the key is not
// wedged, and the stage drains.
func TestSkipCallPanicInAKeyLetsTheKeyGoOn(t *testing.T) {
	a := flow.MapAsyncByKey(2, func(*stream.Message[int]) string { return "one key" },
		func(_ context.Context, x int) (int, error) { return x, nil },
		flow.Lanes(backpressure.StrictPriority(2)),
		flow.SkipCall(func(x int) (int, bool) {
			if x == 7 {
				panic("bad skip")
			}
			return -x - 1, x%2 == 0
		}))
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(20))), a), out)
	panics := countPanics(g, func(v any) bool { return v == 7 })
	run(t, g)
	st := a.Stats()
	if len(out.Values()) != 19 || panics.Load() != 1 || st.InFlight != 0 || st.Waiting != 0 || st.Skipped != 10 {
		t.Fatalf("%d delivered, %d panics failed, stats %+v: want 19 and 1, nothing held, 10 skipped", len(out.Values()), panics.Load(), st)
	}
}

// Messages SkipCall answers take no time: folded into the stage's
// average call duration they make it look like a stage of no-op calls,
// which runs its calls on its own goroutine, one after the other. A
// replay storm that skips its steps, followed by two calls of a slow
// service, must still run the two at once (parallelism 8): 1 s, not 2.
// The control (the two calls alone) takes 1 s.
func TestSkipCallDoesNotMakeSlowCallsRunOneAfterTheOther(t *testing.T) {
	for _, skipped := range []int{0, 2000} {
		t.Run(strconv.Itoa(skipped)+" skipped first", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var vs []int
				for i := range skipped {
					vs = append(vs, -1-i)
				}
				vs = append(vs, 1, 2)
				a := flow.MapAsync(8, func(_ context.Context, v int) (int, error) {
					time.Sleep(time.Second)
					return v, nil
				}, flow.SkipCall(func(v int) (int, bool) { return v, v < 0 }))
				g := stream.New()
				stream.To(stream.Via(stream.From(g, source.Slice(vs)), a), sink.Discard[int]())
				start := time.Now()
				run(t, g)
				if took := time.Since(start); took != time.Second {
					t.Errorf("the two slow calls took %v after %d skipped messages: want 1s, run at once", took, skipped)
				}
			})
		})
	}
}

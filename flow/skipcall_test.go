package flow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// A message SkipCall answers leaves with its result and no call: the
// limiter, the call hooks and the statistics hear only of the calls made.
func TestSkipCallMakesNoCall(t *testing.T) {
	var called, onCall, onDone atomic.Int64
	lim := &countingLimiter{}
	a := flow.MapAsync(4, func(_ context.Context, x int) (int, error) {
		called.Add(1)
		return x * 10, nil
	}, flow.SkipCall(func(x int) (int, bool) { return -x, x%2 == 0 }),
		flow.WithLimiter(lim), flow.OnCall(func(flow.CallInfo) { onCall.Add(1) }), flow.OnDone(func(flow.DoneInfo) { onDone.Add(1) }))
	g := stream.New()
	var attempts atomic.Int64
	out := sink.Collect[int]()
	s := stream.Via(stream.From(g, source.Slice(ints(100))), a)
	s = stream.Via(s, stream.FlowFunc[int, int](func(ctx context.Context, in *stream.Inlet[int], o *stream.Outlet[int]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range b.Items {
				if m.Value <= 0 {
					attempts.Add(int64(m.Attempt)) // a skipped message: no attempt
				}
				if err := o.Send(ctx, m); err != nil {
					return err
				}
			}
			b.Release()
		}
	}))
	stream.To(s, out)
	run(t, g)
	got := out.Values()
	if len(got) != 100 {
		t.Fatalf("%d messages out of 100", len(got))
	}
	skipped, tens := 0, 0
	for _, v := range got {
		switch {
		case v <= 0 && (-v)%2 == 0:
			skipped++
		case v > 0 && v%10 == 0 && (v/10)%2 == 1:
			tens++
		default:
			t.Fatalf("unexpected result %d", v)
		}
	}
	st := a.Stats()
	if skipped != 50 || tens != 50 || called.Load() != 50 || st.Calls != 50 || st.Skipped != 50 ||
		lim.observed.Load() != 50 || onCall.Load() != 50 || onDone.Load() != 50 || attempts.Load() != 0 {
		t.Fatalf("skipped %d, called %d (stats: %d calls, %d skipped), limiter told %d, OnCall %d, OnDone %d, skipped messages' attempts %d: "+
			"want 50 skipped, 50 calls everywhere, no attempt for a skipped message",
			skipped, called.Load(), st.Calls, st.Skipped, lim.observed.Load(), onCall.Load(), onDone.Load(), attempts.Load())
	}
}

// An open breaker refuses calls, not messages that need none: they pass,
// and the breaker counts nothing of them (a success counted while it
// probes would close it for a service still down).
func TestSkipCallPassesAnOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 5, OpenFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		down := errors.New("service down")
		// The first 20 messages call a service that is down (opening the
		// breaker); the next 30 need no call.
		a := flow.MapAsync(1, func(_ context.Context, x int) (int, error) {
			return 0, stream.Transient(down)
		}, flow.Breaker(br), flow.SkipCall(func(x int) (int, bool) { return x, x >= 20 }))
		g := stream.New()
		out := sink.Collect[int]()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(50))), a), out)
		var failed atomic.Int64
		stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
			failed.Add(1)
			return nil
		}))
		run(t, g)
		st := a.Stats()
		if br.State() != backpressure.Open || len(out.Values()) != 30 || failed.Load() != 20 || st.Skipped != 30 || st.Calls+st.Refused != 20 {
			t.Fatalf("breaker %v, %d delivered, %d failed, stats %+v: want open, the 30 that need no call delivered, 20 failed",
				br.State(), len(out.Values()), failed.Load(), st)
		}
	})
}

// A panic in SkipCall's function fails its message, and only it.
func TestSkipCallPanicFailsTheMessage(t *testing.T) {
	a := flow.MapAsync(2, func(_ context.Context, x int) (int, error) { return x, nil },
		flow.SkipCall(func(x int) (int, bool) {
			if x == 7 {
				panic("bad skip")
			}
			return x, false
		}))
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(20))), a), out)
	perr := countPanics(g, nil)
	run(t, g)
	if len(out.Values()) != 19 || perr.Load() != 1 {
		t.Fatalf("%d delivered, %d panics failed: want 19 and 1", len(out.Values()), perr.Load())
	}
}

// SkipCall's function must have the stage's types: one of others is a
// configuration error that names both.
func TestSkipCallOfOtherTypesIsRefused(t *testing.T) {
	a := flow.MapAsync(1, func(_ context.Context, x int) (string, error) { return "", nil },
		flow.SkipCall(func(s string) (string, bool) { return s, true }))
	err := a.Validate()
	var ce *stream.ConfigError
	if !errors.As(err, &ce) || ce.Argument != "SkipCall" || !strings.Contains(err.Error(), "func(int) (string, bool)") ||
		!strings.Contains(err.Error(), "func(string) (string, bool)") {
		t.Fatalf("Validate: %v, want a ConfigError on SkipCall naming func(string) (string, bool) and func(int) (string, bool)", err)
	}
	if err := flow.MapAsyncByKey(1, func(*stream.Message[int]) string { return "" }, func(_ context.Context, x int) (string, error) { return "", nil },
		flow.SkipCall(func(x int) (string, bool) { return "", false })).Validate(); err != nil {
		t.Fatalf("Validate with matching types: %v", err)
	}
}

// countPanics counts the failures of g that are panics (and, if only is
// given, of the messages it accepts).
func countPanics(g *stream.Graph, only func(v any) bool) *atomic.Int64 {
	var n atomic.Int64
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		var pe *stream.PanicError
		if errors.As(m.Value.Err, &pe) && (only == nil || only(m.Value.Value)) {
			n.Add(1)
		}
		return nil
	}))
	return &n
}

// skipLanes runs vs, all at level 0, through a stage of 2 slots whose
// calls sleep 1 s and whose negative values SkipCall answers (lanes of 3
// levels, LaneScaling drain 2 s): it returns the stage's lane stats at
// each of the times after the start (synctest's), and the stage.
func skipLanes(t *testing.T, vs []int, at ...time.Duration) ([][]flow.LaneStats, *flow.Async[int, int]) {
	t.Helper()
	a := flow.MapAsync(2, func(_ context.Context, v int) (int, error) {
		time.Sleep(time.Second)
		return v, nil
	}, flow.Window(64), flow.Lanes(backpressure.StrictPriority(3)), flow.LaneScaling(2*time.Second, nil),
		flow.SkipCall(func(v int) (int, bool) { return v, v < 0 }))
	g := stream.New()
	stream.To(stream.Via(stream.From(g, valuesAt0(vs)), a), sink.Discard[int]())
	done := make(chan error)
	go func() { done <- g.Run(context.Background()) }()
	var sts [][]flow.LaneStats
	var slept time.Duration
	for _, d := range at {
		time.Sleep(d - slept)
		slept = d
		synctest.Wait()
		sts = append(sts, a.Stats().Levels)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return sts, a
}

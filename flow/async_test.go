package flow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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

// randomSleep returns a call that sleeps a random time chosen by seed,
// under synctest's fake clock.
func randomSleep(seed uint64) func(context.Context, int) (int, error) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func(ctx context.Context, x int) (int, error) {
		mu.Lock()
		d := time.Duration(rng.IntN(50)) * time.Millisecond
		mu.Unlock()
		select {
		case <-time.After(d):
			return x, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func TestMapAsyncModesUnderRandomLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("runs each mode through seconds of random service latency: make test runs it, -short does not")
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const n = 500
				for _, mode := range []string{"unordered", "ordered", "keyed"} {
					tr := stream.NewTracker(0)
					a := flow.MapAsync(16, randomSleep(seed))
					switch mode {
					case "ordered":
						a = flow.MapAsync(16, randomSleep(seed), flow.InOrder())
					case "keyed":
						a = flow.MapAsyncByKey(16, func(m *stream.Message[int]) string { return fmt.Sprint(m.Value % 7) }, randomSleep(seed))
					}
					g := stream.New()
					s := stream.Via(stream.From(g, source.Slice(ints(n), source.Track(tr))), a)
					out := sink.Collect[int]()
					stream.To(s, out)
					run(t, g)
					got := out.Values()
					if len(got) != n {
						t.Fatalf("%s: %d results, want %d", mode, len(got), n)
					}
					switch mode {
					case "unordered":
						if slices.IsSorted(got) {
							t.Fatalf("unordered results came in input order: random latencies should reorder them")
						}
						slices.Sort(got)
						if !slices.Equal(got, ints(n)) {
							t.Fatalf("unordered lost or duplicated results")
						}
					case "ordered":
						if !slices.Equal(got, ints(n)) {
							t.Fatalf("ordered results out of order")
						}
					case "keyed":
						last := map[int]int{}
						for _, v := range got {
							if p, ok := last[v%7]; ok && p > v {
								t.Fatalf("key %d: %d emitted after %d", v%7, v, p)
							}
							last[v%7] = v
						}
					}
					checkSettled(t, tr)
				}
			})
		})
	}
}

func TestMapAsyncKeyedRunsOneCallPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running := map[int]int{}
		maxSeen := 0
		var peak atomic.Int64
		var now atomic.Int64
		fn := func(ctx context.Context, x int) (int, error) {
			mu.Lock()
			running[x%5]++
			if running[x%5] > maxSeen {
				maxSeen = running[x%5]
			}
			mu.Unlock()
			if c := now.Add(1); c > peak.Load() {
				peak.Store(c)
			}
			time.Sleep(10 * time.Millisecond)
			now.Add(-1)
			mu.Lock()
			running[x%5]--
			mu.Unlock()
			return x, nil
		}
		g := stream.New()
		s := stream.Via(stream.From(g, source.Slice(ints(200))),
			flow.MapAsyncByKey(64, func(m *stream.Message[int]) string { return fmt.Sprint(m.Value % 5) }, fn))
		stream.To(s, sink.Discard[int]())
		run(t, g)
		if maxSeen != 1 {
			t.Fatalf("%d calls of one key ran at once", maxSeen)
		}
		if peak.Load() != 5 {
			t.Fatalf("peak concurrency %d, want 5 (one per key)", peak.Load())
		}
	})
}

func TestMapAsyncMaxPerPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		running := map[int32]int{}
		worst := 0
		g := stream.New()
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 300 {
				m := stream.NewMessage(i, stream.Handle{})
				m.Partition = int32(i % 3)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		a := flow.MapAsync(64, func(ctx context.Context, x int) (int, error) {
			mu.Lock()
			running[int32(x%3)]++
			worst = max(worst, running[int32(x%3)])
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running[int32(x%3)]--
			mu.Unlock()
			return x, nil
		}, flow.MaxPerPartition(4))
		out := sink.Collect[int]()
		stream.To(stream.Via(stream.From(g, src), a), out)
		run(t, g)
		if worst != 4 || len(out.Values()) != 300 {
			t.Fatalf("worst per-partition concurrency %d (want 4), %d results", worst, len(out.Values()))
		}
	})
}

func TestMapAsyncTimeoutsPanicsAndErrorsAreDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		fn := func(ctx context.Context, x int) (int, error) {
			switch x % 4 {
			case 1:
				<-ctx.Done() // hangs until the timeout
				return 0, ctx.Err()
			case 2:
				panic("call bug")
			case 3:
				return 0, errors.New("service said no")
			}
			return x, nil
		}
		a := flow.MapAsync(8, fn, flow.CallTimeout(100*time.Millisecond))
		g := stream.New()
		s := stream.Via(stream.From(g, source.Slice(ints(100), source.Track(tr))), a)
		out := sink.Collect[int]()
		stream.To(s, out)
		reasons := map[string]int{}
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			var pe *stream.PanicError
			switch err := m.Value.Err; {
			case errors.Is(err, flow.ErrCallTimeout) && errors.Is(err, context.DeadlineExceeded):
				reasons["timeout"]++
			case errors.As(err, &pe):
				reasons["panic"]++
			case strings.Contains(err.Error(), "said no"):
				reasons["error"]++
			}
			return nil
		}))
		run(t, g)
		if len(out.Values()) != 25 || reasons["timeout"] != 25 || reasons["panic"] != 25 || reasons["error"] != 25 {
			t.Fatalf("%d ok, reasons %v", len(out.Values()), reasons)
		}
		if st := a.Stats(); st.Timeouts != 25 || st.Calls != 100 || st.Failed != 75 || st.InFlight != 0 {
			t.Fatalf("stats %+v", st)
		}
		checkSettled(t, tr)
	})
}

func TestMapAsyncCancelMidFlightLeavesInFlightUnsettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ctx, cancel := context.WithCancel(context.Background())
		g := stream.New(stream.WithDrainTimeout(time.Second))
		fn := func(ctx context.Context, x int) (int, error) {
			select {
			case <-time.After(time.Hour): // a call that outlives the drain
				return x, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		s := stream.Via(stream.From(g, source.Generator(func(i int64) int { return int(i) }, source.Track(tr))),
			flow.MapAsync(32, fn))
		stream.To(s, sink.Discard[int]())
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		synctest.Wait()
		cancel()
		err := <-done
		if !errors.Is(err, stream.ErrDrainTimeout) {
			t.Fatalf("Run = %v, want ErrDrainTimeout", err)
		}
		// Nothing was dead-lettered or completed: every message stays
		// unsettled and is replayed after a restart.
		if st := tr.Stats(); st.Total() != 0 || st.Duplicates != 0 {
			t.Fatalf("settled %+v", st)
		}
	})
}

func TestMapAsyncFatalEndsRun(t *testing.T) {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice(ints(100))), flow.MapAsync(4,
		func(ctx context.Context, x int) (int, error) {
			if x == 50 {
				return 0, stream.Fatal(errors.New("credentials revoked"))
			}
			return x, nil
		}), stream.Name("call"))
	stream.To(s, sink.Discard[int]())
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "call" || !strings.Contains(err.Error(), "credentials revoked") {
		t.Fatalf("Run = %v", err)
	}
}

func TestMapAsyncConfigErrors(t *testing.T) {
	fn := func(ctx context.Context, x int) (int, error) { return x, nil }
	for name, f := range map[string]stream.Flow[int, int]{
		"parallelism": flow.MapAsync(0, fn),
		"fn":          flow.MapAsync[int, int](4, nil),
		"Window":      flow.MapAsync(8, fn, flow.Window(4)),
		"CallTimeout": flow.MapAsync(8, fn, flow.CallTimeout(-time.Second)),
		"key":         flow.MapAsyncByKey[int, int](8, nil, fn),
		"keyed":       flow.MapAsyncByKey(8, func(*stream.Message[int]) string { return "" }, fn, flow.MaxPerPartition(2)),
		"WithLimiter": flow.MapAsync(8, fn, flow.WithLimiter(backpressure.Fixed(0))),
		"combined":    flow.MapAsync(8, fn, flow.ByMessageKey(), flow.MaxPerPartition(2)),
	} {
		g := stream.New()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(1))), f), sink.Discard[int]())
		err := g.Run(context.Background())
		if !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("%s: Run = %v, want ErrInvalid", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestMapAsyncWithAdaptiveLimiterStaysWithinParallelism(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Target: 20 * time.Millisecond, Initial: 4, Max: 64})
		if err != nil {
			t.Fatal(err)
		}
		var now, peak atomic.Int64
		fn := func(ctx context.Context, x int) (int, error) {
			c := now.Add(1)
			for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
			}
			// A service that slows down as concurrency grows past 16.
			time.Sleep(time.Duration(max(5, c)) * time.Millisecond)
			now.Add(-1)
			return x, nil
		}
		a := flow.MapAsync(32, fn, flow.WithLimiter(lim))
		g := stream.New()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(5000))), a), sink.Discard[int]())
		run(t, g)
		st := lim.Stats()
		if peak.Load() > 32 || st.Increases == 0 || st.Decreases == 0 {
			t.Fatalf("peak %d, limiter %+v: want adaptation both ways within parallelism 32", peak.Load(), st)
		}
		// The limit settles where latency meets the 20 ms target.
		if st.Limit < 10 || st.Limit > 26 {
			t.Fatalf("limit %d, want near 20 (latency = concurrency ms)", st.Limit)
		}
	})
}

func TestMapAsyncSettlesEveryMessageOnceUnderRandomFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("tens of thousands of calls with random failures and retries: make test runs it, -short does not")
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for _, opts := range [][]flow.AsyncOption{nil, {flow.InOrder()}, {flow.ByMessageKey()}, {flow.MaxPerPartition(2)}} {
					tr := stream.NewTracker(0)
					var mu sync.Mutex
					rng := rand.New(rand.NewPCG(seed, 7))
					src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
						for i := range 400 {
							m := stream.NewMessage(i, tr.Track())
							m.Key = []byte(fmt.Sprint(i % 13))
							m.Partition = int32(i % 5)
							if err := out.Send(ctx, m); err != nil {
								return err
							}
						}
						return nil
					})
					fn := func(ctx context.Context, x int) (int, error) {
						mu.Lock()
						r, d := rng.IntN(10), time.Duration(rng.IntN(20))*time.Millisecond
						mu.Unlock()
						time.Sleep(d)
						switch r {
						case 0:
							return 0, errors.New("random failure")
						case 1:
							panic("random panic")
						}
						return x, nil
					}
					g := stream.New()
					s := stream.Via(stream.From(g, src), flow.MapAsync(8, fn, append(opts, flow.CallTimeout(15*time.Millisecond))...))
					stream.To(s, sink.Discard[int]())
					stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
					run(t, g)
					st := checkSettled(t, tr)
					if st.Settled[stream.DeadLettered] == 0 || st.Settled[stream.Completed] == 0 {
						t.Fatalf("outcomes %+v: want both failures and completions", st.Settled)
					}
				}
			})
		})
	}
}

package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// start runs g until the stop it returns is called, which cancels the run
// and returns Run's error.
func start(g *stream.Graph) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

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
		stop := start(g)
		time.Sleep(time.Second)
		synctest.Wait()
		st := a.Stats()
		_ = stop()
		if got.Load() != 20 || st.InFlight != 0 || st.Waiting != 0 {
			t.Fatalf("%d results; idle stage's stats %+v, want InFlight 0 and Waiting 0", got.Load(), st)
		}
	})
}

// ctlLimiter's limit moves through a fixed sequence, one step per
// observed call.
type ctlLimiter struct {
	mu    sync.Mutex
	seq   []int
	i     int
	prev  int // the limit before the last change
	cur   int
	steps int
}

func (l *ctlLimiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

func (l *ctlLimiter) Observe(backpressure.Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps++
	if l.steps%3 == 0 {
		l.i = (l.i + 1) % len(l.seq)
		l.prev, l.cur = l.cur, l.seq[l.i]
	}
}

func (l *ctlLimiter) both() (prev, cur int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prev, l.cur
}

// Calls stay within the parallelism, and nothing wedges, as the limit
// moves down to 1 and up (see the log for the calls that started as the
// limit changed).
func TestMapAsyncConcurrencyWithinChangingLimit(t *testing.T) {
	for _, name := range []string{"unordered", "inorder", "keyed", "perpartition", "window"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				seq := []int{8, 1, 6, 2, 1, 8, 3, 1, 1, 5}
				lim := &ctlLimiter{seq: seq, cur: seq[0], prev: seq[0]}
				var running, peak, overCur, overBoth atomic.Int64
				var rmu sync.Mutex
				rng := rand.New(rand.NewPCG(1, 2))
				fn := func(ctx context.Context, x int) (int, error) {
					c := running.Add(1)
					prev, cur := lim.both()
					if c > int64(cur) {
						overCur.Add(1)
					}
					if c > int64(max(prev, cur)) {
						overBoth.Add(1)
					}
					for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
					}
					rmu.Lock()
					d := time.Duration(1+rng.IntN(5)) * time.Millisecond
					rmu.Unlock()
					time.Sleep(d)
					running.Add(-1)
					return x, nil
				}
				opts := []flow.AsyncOption{flow.WithLimiter(lim)}
				switch name {
				case "inorder":
					opts = append(opts, flow.InOrder())
				case "keyed":
					opts = append(opts, flow.ByMessageKey())
				case "perpartition":
					opts = append(opts, flow.MaxPerPartition(3))
				case "window":
					opts = append(opts, flow.Window(64))
				}
				a := flow.MapAsync(8, fn, opts...)
				tr := stream.NewTracker(0)
				g := stream.New()
				var got atomic.Int64
				stream.To(stream.Via(stream.From(g, heldSource(600, tr)), a),
					sink.Func(func(context.Context, int) error { got.Add(1); return nil }))
				stop := start(g)
				time.Sleep(time.Hour)
				synctest.Wait()
				n := got.Load()
				_ = stop()
				if n != 600 {
					t.Fatalf("%d of 600 results: wedged (stats %+v)", n, a.Stats())
				}
				if peak.Load() > 8 {
					t.Fatalf("peak %d beyond the parallelism", peak.Load())
				}
				// Not failures: a call taken under one limit starts after
				// other calls' Observe changed it (once, or, on a busy
				// machine, more).
				t.Logf("calls started beyond the current limit %d, beyond the one before too %d; peak %d",
					overCur.Load(), overBoth.Load(), peak.Load())
				checkSettled(t, tr)
			})
		})
	}
}

// A stop with many jobs queued in the pool: no job is dead-lettered, and
// the unsettled ones are replayable (nothing settled twice).
func TestMapAsyncStopWithQueuedJobsFailsNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		var afterCancel, calls atomic.Int64
		fn := func(ctx context.Context, x int) (int, error) {
			calls.Add(1)
			if ctx.Err() != nil {
				afterCancel.Add(1)
				return 0, ctx.Err()
			}
			select {
			case <-time.After(10 * time.Millisecond):
				return x, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		g := stream.New(stream.WithDrainTimeout(time.Millisecond))
		a := flow.MapAsync(2, fn, flow.Window(256))
		stream.To(stream.Via(stream.From(g, heldSource(1000, tr)), a), sink.Discard[int]())
		var dead atomic.Int64
		stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
			dead.Add(1)
			return nil
		}))
		stop := start(g)
		time.Sleep(55 * time.Millisecond)
		err := stop()
		if dead.Load() != 0 || afterCancel.Load() != 0 {
			t.Fatalf("Run = %v; %d dead letters, %d of %d calls made after the stop", err, dead.Load(), afterCancel.Load(), calls.Load())
		}
		if st := tr.Stats(); st.Duplicates != 0 || st.Settled[stream.DeadLettered] != 0 {
			t.Fatalf("settled %+v", st)
		}
		t.Logf("Run = %v; %d calls; %+v", err, calls.Load(), tr.Stats())
	})
}

// Many keys coming and going (groups reused) with retries: per-key order
// and one call per key at once.
func TestMapAsyncKeyGroupReuseKeepsOrder(t *testing.T) {
	for seed := range uint64(5) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(seed, 3))
			runningKey := map[int]int{}
			last := map[int]int{}
			bad := ""
			fn := func(ctx context.Context, x int) (int, error) {
				k := x % 37
				mu.Lock()
				runningKey[k]++
				if runningKey[k] > 1 && bad == "" {
					bad = fmt.Sprintf("key %d: two calls at once", k)
				}
				d, r := time.Duration(rng.IntN(4))*time.Millisecond, rng.IntN(6)
				mu.Unlock()
				time.Sleep(d)
				mu.Lock()
				runningKey[k]--
				mu.Unlock()
				if r == 0 {
					return 0, stream.Transient(errors.New("flaky"))
				}
				mu.Lock()
				if p, ok := last[k]; ok && p > x && bad == "" {
					bad = fmt.Sprintf("key %d: %d called to success after %d", k, x, p)
				}
				last[k] = x
				mu.Unlock()
				return x, nil
			}
			tr := stream.NewTracker(0)
			g := stream.New()
			a := flow.MapAsyncByKey(6, func(m *stream.Message[int]) string { return fmt.Sprint(m.Value % 37) }, fn,
				flow.Retry(fastRetry()), flow.Window(20), flow.WithLogger(slog.New(slog.DiscardHandler)))
			src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
				for i := range 2000 {
					if err := out.Send(ctx, stream.NewMessage(i, tr.Track())); err != nil {
						return err
					}
				}
				return nil
			})
			stream.To(stream.Via(stream.From(g, src), a), sink.Discard[int]())
			stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
			run(t, g)
			if bad != "" {
				t.Fatal(bad)
			}
			checkSettled(t, tr)
		})
	}
}

// A failure in a stage without a clock still says when it failed.
func TestMapAsyncUnclockedFailureHasFirstFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fn := func(ctx context.Context, x int) (int, error) {
			time.Sleep(time.Millisecond) // slow: the clock is sampled
			if x%2 == 0 {
				return 0, errors.New("no")
			}
			return x, nil
		}
		g := stream.New()
		stream.To(stream.Via(stream.From(g, heldSourceDone(200)), flow.MapAsync(4, fn)), sink.Discard[int]())
		var zero, early, n atomic.Int64
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			n.Add(1)
			if m.Value.FirstFailure.IsZero() {
				zero.Add(1)
			}
			if m.Value.FirstFailure.Before(start) || m.Value.At.Before(m.Value.FirstFailure) {
				early.Add(1)
			}
			return nil
		}))
		run(t, g)
		if n.Load() != 100 || zero.Load() != 0 || early.Load() != 0 {
			t.Fatalf("%d failures, %d without FirstFailure, %d out of range", n.Load(), zero.Load(), early.Load())
		}
	})
}

func heldSourceDone(n int) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for i := range n {
			if err := out.Send(ctx, stream.NewMessage(i, stream.Handle{})); err != nil {
				return err
			}
		}
		return nil
	})
}

func fastRetry() flow.RetryPolicy {
	p := flow.Background()
	p.MaxAttempts, p.BaseDelay, p.MaxDelay = 50, time.Millisecond, 3*time.Millisecond
	return p
}

// loweringLimiter's limit is 8 until its 16th observed call, then 1.
type loweringLimiter struct {
	mu sync.Mutex
	n  int
	at time.Time // when it went to 1
}

func (l *loweringLimiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at.IsZero() {
		return 8
	}
	return 1
}

func (l *loweringLimiter) Observe(backpressure.Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n++; l.n == 16 {
		l.at = time.Now()
	}
}

// lowered reports whether the limit went to 1 before now.
func (l *loweringLimiter) lowered(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.at.IsZero() && l.at.Before(now)
}

// A limit lowered while the stage is blocked on its output holds at once:
// the workers read the limiter, not the stage's copy of its limit (which
// the stage, waiting for room downstream, cannot update). Under the fake
// clock every call takes 1 ms, so calls started after the tick of the
// change were taken after it.
func TestMapAsyncLimitLoweredWhileStageBlockedOnOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &loweringLimiter{}
		var running, over, after atomic.Int64
		fn := func(ctx context.Context, x int) (int, error) {
			c := running.Add(1)
			if lim.lowered(time.Now()) {
				after.Add(1)
				if c > 1 {
					over.Add(1)
				}
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			return x, nil
		}
		a := flow.MapAsync(8, fn, flow.WithLimiter(lim), flow.Window(200))
		g := stream.New(stream.WithCapacity(1), stream.WithBatchSize(1))
		gate := make(chan struct{})
		var got atomic.Int64
		stream.To(stream.Via(stream.From(g, heldSource(200, nil)), a), sink.Func(func(ctx context.Context, _ int) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			got.Add(1)
			return nil
		}))
		stop := start(g)
		time.Sleep(100 * time.Millisecond) // the stage is blocked on its output from the first results on
		synctest.Wait()
		blocked := after.Load()
		close(gate)
		time.Sleep(time.Second)
		synctest.Wait()
		n := got.Load()
		_ = stop()
		if n != 200 {
			t.Fatalf("%d of 200 results", n)
		}
		if after.Load() == 0 || over.Load() != 0 {
			t.Fatalf("%d calls started after the limit went to 1 (%d while the stage was blocked), %d of them beside another",
				after.Load(), blocked, over.Load())
		}
	})
}

// Calls that were fast and turn slow run in parallel: a chunk of calls run
// back to back (by the stage itself while calls take less than handing
// them on, or by a worker, sized for the recent average) stops after the
// call that overran it, and its other jobs go to free workers. Before,
// they ran one after another: with a dependency that hung, MapAsync(64)
// took 56 s of CallTimeout(1s) before its stage moved again.
//
// The clock is synctest's: calls that start together start at the same
// instant (to the millisecond), so the slow calls' distinct start
// instants count the rounds they ran in. In parallel, 4 x parallelism of
// them need about 5 (the first slow call runs alone: nothing knew it
// would be slow).
func TestMapAsyncCallsTurningSlowRunInParallel(t *testing.T) {
	for _, c := range []struct {
		name string
		// workers: message 0's call runs until the slow calls are done,
		// so the stage never runs calls itself; fast calls take 1 µs, so
		// workers take them in chunks; the source pauses before the slow
		// messages, which then come as a queue that idle workers take in
		// chunks sized for the fast calls.
		workers bool
		hang    bool // slow calls wait for CallTimeout, not 10 ms
	}{
		{name: "run by the stage"},
		{name: "run by the stage, hanging", hang: true},
		{name: "run by workers in chunks", workers: true},
	} {
		for _, par := range []int{8, 64} {
			t.Run(fmt.Sprintf("%s/%d", c.name, par), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const fast = 5000
					slow := 4 * par
					var mu sync.Mutex
					starts := map[time.Time]int{}
					ended := 0
					slowDone := make(chan struct{})
					fn := func(ctx context.Context, v int) (int, error) {
						switch {
						case v == 0 && c.workers:
							<-slowDone
							return v, nil
						case v <= fast:
							if c.workers {
								time.Sleep(time.Microsecond)
							}
							return v, nil
						}
						mu.Lock()
						starts[time.Now().Truncate(time.Millisecond)]++ // a chunk's fast calls come a microsecond apart
						mu.Unlock()
						var err error
						if c.hang {
							<-ctx.Done()
							err = ctx.Err()
						} else {
							time.Sleep(10 * time.Millisecond)
						}
						mu.Lock()
						if ended++; ended == slow {
							close(slowDone)
						}
						mu.Unlock()
						return v, err
					}
					var opts []flow.AsyncOption
					if c.hang {
						opts = append(opts, flow.CallTimeout(time.Second))
					}
					g := stream.New()
					var results, failures atomic.Int64
					src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
						for i := range fast + 1 + slow {
							if i == fast+1 && c.workers {
								if err := out.Flush(ctx); err != nil {
									return err
								}
								time.Sleep(time.Second)
							}
							if err := out.Send(ctx, stream.NewMessage(i, stream.Handle{})); err != nil {
								return err
							}
						}
						return nil
					})
					stream.To(stream.Via(stream.From(g, src), flow.MapAsync(par, fn, opts...)),
						sink.Func(func(context.Context, int) error { results.Add(1); return nil }))
					stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
						failures.Add(1)
						return nil
					}))
					run(t, g)
					if got := results.Load() + failures.Load(); got != int64(fast+1+slow) {
						t.Fatalf("%d outcomes of %d messages", got, fast+1+slow)
					}
					if len(starts) > 6 {
						t.Fatalf("the %d slow calls started at %d different instants, in parallel about 5: they ran one after another (%v)",
							slow, len(starts), starts)
					}
				})
			})
		}
	}
}

// A chunk cut at a call that was slow and then panicked (in the call, or
// in OnCall after it): the panicking message fails once with a
// *stream.PanicError, the rest of the chunk is called once each by
// someone, and the idle stage reports nothing running. Run by the stage
// (calls of no time) and by workers (calls of 1 µs while message 0 holds
// the stage off running calls itself).
func TestMapAsyncCutAtSlowPanic(t *testing.T) {
	for _, workers := range []bool{false, true} {
		for _, inOnCall := range []bool{false, true} {
			t.Run(fmt.Sprintf("workers=%v/oncall=%v", workers, inOnCall), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n = 3000
					var mu sync.Mutex
					calls := make([]int, n)
					release := make(chan struct{})
					// Sparse enough, for the stage, that the average falls back
					// under 2 µs between slow calls and the stage runs calls itself.
					period := 37
					if !workers {
						period = 301
					}
					slow := func(v int) bool { return v > 0 && v%period == 5 }
					fn := func(ctx context.Context, v int) (int, error) {
						mu.Lock()
						calls[v]++
						mu.Unlock()
						switch {
						case v == 0 && workers:
							<-release
						case slow(v):
							time.Sleep(time.Millisecond)
							if !inOnCall {
								panic(fmt.Sprint("slow ", v))
							}
							return -v, nil // OnCall panics for it
						case workers:
							time.Sleep(time.Microsecond)
						}
						return v, nil
					}
					opts := []flow.AsyncOption{flow.Window(256)}
					if inOnCall {
						opts = append(opts, flow.OnCall(func(ci flow.CallInfo) {
							if ci.Latency >= time.Millisecond && ci.Latency < time.Second { // not message 0, held
								panic("on call")
							}
						}))
					}
					a := flow.MapAsync(16, fn, opts...)
					tr := stream.NewTracker(0)
					g := stream.New()
					results := sink.Collect[int]()
					stream.To(stream.Via(stream.From(g, stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
						for i := range n {
							if i%100 == 0 && !workers {
								// A pause: the stage empties, and takes the next ones itself.
								if err := out.Flush(ctx); err != nil {
									return err
								}
								time.Sleep(time.Millisecond)
							}
							if err := out.Send(ctx, stream.NewMessage(i, tr.Track())); err != nil {
								return err
							}
						}
						if err := out.Flush(ctx); err != nil {
							return err
						}
						<-ctx.Done()
						return nil
					})), a), results)
					var fmu sync.Mutex
					var failed []int
					stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
						var pe *stream.PanicError
						if !errors.As(m.Value.Err, &pe) {
							t.Errorf("message %v failed with %v, want a panic", m.Value.Value, m.Value.Err)
						}
						fmu.Lock()
						failed = append(failed, m.Value.Value.(int))
						fmu.Unlock()
						return nil
					}))
					stop := start(g)
					time.Sleep(time.Minute)
					close(release)
					time.Sleep(time.Minute)
					synctest.Wait()
					st, ts := a.Stats(), tr.Stats()
					if err := stop(); err != nil {
						t.Fatal(err)
					}
					if ts.Total() != n || ts.Duplicates != 0 {
						t.Fatalf("settled %+v of %d", ts, n)
					}
					if st.InFlight != 0 || st.Waiting != 0 || st.Calls != n {
						t.Fatalf("idle stage's stats %+v, want %d calls", st, n)
					}
					for v, c := range calls {
						if c != 1 {
							t.Fatalf("message %d called %d times", v, c)
						}
					}
					for _, m := range results.Messages() {
						if slow(m.Value) || slow(-m.Value) {
							t.Fatalf("message %d emitted, want failed", m.Value)
						}
					}
					for _, v := range failed {
						if !slow(v) {
							t.Fatalf("message %d failed", v)
						}
					}
					if want := (n - 5 + period - 1) / period; len(failed) != want {
						t.Fatalf("%d failed, want %d", len(failed), want)
					}
				})
			})
		}
	}
}

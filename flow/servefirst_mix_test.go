package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
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

// SkipCall, ServeFirst and retries together, keyed, through a window
// smaller than the input: every message comes out once, a key's calls
// one at a time in its order, InOrder in input order, and the stage's
// gauges end at zero.
func TestSkipServeFirstRetriesKeyedEndWithEveryMessageOnce(t *testing.T) {
	type variant struct {
		name string
		opts []flow.AsyncOption
	}
	for _, c := range []variant{
		{"unordered", nil},
		{"in_order", []flow.AsyncOption{flow.InOrder()}},
		{"lanes", []flow.AsyncOption{flow.Lanes(backpressure.WeightedPriority(3, 1).Aging(0, 50*time.Millisecond), 0, 1)}},
		{"lanes_in_order", []flow.AsyncOption{flow.InOrder(), flow.Lanes(backpressure.StrictPriority(2))}},
	} {
		for _, par := range []int{1, 3} {
			t.Run(c.name+"_"+strconv.Itoa(par), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n = 300
					var mu sync.Mutex
					failed := map[int]bool{}
					running := map[string]int{}
					var called []int
					p := flow.Interactive()
					p.BaseDelay, p.Jitter, p.MaxElapsed, p.MaxAttempts = 5*time.Millisecond, flow.NoJitter, time.Hour, 4
					keyOf := func(v int) string { return strconv.Itoa(v % 4) }
					opts := append([]flow.AsyncOption{flow.Window(8), flow.Retry(p), flow.WithLogger(slog.New(slog.DiscardHandler)), flow.ByMessageKey(),
						flow.SkipCall(func(x int) (int, bool) { return x, x%3 == 1 }),
						flow.ServeFirst(func(x int) bool { return x%7 == 0 })}, c.opts...)
					a := flow.MapAsync(par, func(ctx context.Context, x int) (int, error) {
						k := keyOf(x)
						mu.Lock()
						running[k]++
						if running[k] > 1 {
							mu.Unlock()
							return 0, errors.New("two calls of one key at once")
						}
						called = append(called, x)
						first := x%5 == 0 && !failed[x]
						failed[x] = true
						mu.Unlock()
						time.Sleep(time.Duration(x%3) * time.Millisecond)
						mu.Lock()
						running[k]--
						mu.Unlock()
						if first {
							return 0, stream.Transient(errors.New("again"))
						}
						return x, nil
					}, opts...)
					vs := make([]int, n)
					for i := range vs {
						vs[i] = i
					}
					src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
						for _, v := range vs {
							m := stream.NewMessage(v, stream.Handle{})
							m.Key = []byte(keyOf(v))
							m.Priority = uint8(v % 2)
							if err := out.Send(ctx, m); err != nil {
								return err
							}
							if v%10 == 9 {
								if err := out.Flush(ctx); err != nil {
									return err
								}
								time.Sleep(time.Millisecond)
							}
						}
						return nil
					})
					g := stream.New()
					out := sink.Collect[int]()
					stream.To(stream.Via(stream.From(g, src), a), out)
					if err := g.Run(context.Background()); err != nil {
						t.Fatal(err)
					}
					got := out.Values()
					sorted := slices.Clone(got)
					slices.Sort(sorted)
					if !slices.Equal(sorted, vs) {
						t.Fatalf("%d out of %d, not each once: %v", len(got), n, got)
					}
					if c.name == "in_order" || c.name == "lanes_in_order" {
						if !slices.Equal(got, vs) {
							t.Errorf("not in input order: %v", got)
						}
					}
					// Each key's outcomes leave in its order.
					last := map[string]int{}
					for _, v := range got {
						if l, ok := last[keyOf(v)]; ok && l > v {
							t.Errorf("key %s: %d out after %d", keyOf(v), v, l)
						}
						last[keyOf(v)] = v
					}
					st := a.Stats()
					if st.InFlight != 0 || st.Waiting != 0 {
						t.Errorf("stats after the run: %d in flight, %d waiting", st.InFlight, st.Waiting)
					}
					if want := int64(n / 3); st.Skipped != want {
						t.Errorf("skipped %d, want %d", st.Skipped, want)
					}
				})
			})
		}
	}
}

// A stop in the middle of skipped, picked and retried messages, keyed and
// in order: nothing is dead-lettered or settled twice, what the stage
// held stays unsettled to be replayed, and its gauges end at zero.
func TestSkipServeFirstRetriesStopMidRun(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			tr := stream.NewTracker(0)
			var n atomic.Int64
			fn := func(ctx context.Context, x int) (int, error) {
				if n.Add(1)%3 == 0 {
					return 0, stream.Transient(errors.New("again"))
				}
				select {
				case <-time.After(time.Duration(1+x%4) * time.Millisecond):
					return x, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			opts := []flow.AsyncOption{flow.Window(64), flow.ByMessageKey(), flow.Retry(fastRetry()),
				flow.WithLogger(slog.New(slog.DiscardHandler)),
				flow.SkipCall(func(x int) (int, bool) { return x, x%4 == 1 }),
				flow.ServeFirst(func(x int) bool { return x%5 == 0 }),
				flow.Lanes(backpressure.StrictPriority(1))}
			if inOrder {
				opts = append(opts, flow.InOrder())
			}
			g := stream.New(stream.WithDrainTimeout(time.Millisecond))
			a := flow.MapAsync(3, fn, opts...)
			stream.To(stream.Via(stream.From(g, heldSource(2000, tr)), a), sink.Discard[int]())
			var dead atomic.Int64
			stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
				dead.Add(1)
				return nil
			}))
			stop := start(g)
			time.Sleep(40 * time.Millisecond)
			err := stop()
			st := tr.Stats()
			if dead.Load() != 0 || st.Duplicates != 0 || st.Settled[stream.DeadLettered] != 0 {
				t.Fatalf("Run = %v; %d dead letters; settled %+v", err, dead.Load(), st)
			}
			if as := a.Stats(); as.InFlight != 0 || as.Waiting != 0 {
				t.Errorf("stats after the stop: %d in flight, %d waiting", as.InFlight, as.Waiting)
			}
			for lv, ls := range a.Stats().Levels {
				if ls.InFlight != 0 || ls.Waiting != 0 {
					t.Errorf("level %d after the stop: %d in flight, %d waiting", lv, ls.InFlight, ls.Waiting)
				}
			}
			if st.Settled[stream.Completed] == 0 {
				t.Errorf("nothing acked before the stop: %+v", st)
			}
		})
	}
}

// Skipped messages queued behind one call of their key all come out once
// it returns, though nothing else happens: each frees the key for the
// next (the stage must not park with one let go and not completed). The
// source stays open, so no end of input wakes the stage.
func TestSkipCallChainOfAKeyCompletesWithNothingElseHappening(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []flow.AsyncOption
	}{{"keyed", nil}, {"in_order", []flow.AsyncOption{flow.InOrder()}},
		{"lanes", []flow.AsyncOption{flow.Lanes(backpressure.StrictPriority(2))}}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				opts := append([]flow.AsyncOption{flow.Window(16), flow.ByMessageKey(),
					flow.SkipCall(func(x int) (int, bool) { return x, x > 0 })}, c.opts...)
				a := flow.MapAsync(2, func(ctx context.Context, x int) (int, error) {
					<-release
					return x, nil
				}, opts...)
				src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
					for v := range 5 {
						m := stream.NewMessage(v, stream.Handle{})
						m.Key = []byte("k")
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
				out := sink.Collect[int]()
				stream.To(stream.Via(stream.From(g, src), a), out)
				stop := start(g)
				synctest.Wait()
				if got := out.Values(); len(got) != 0 {
					t.Fatalf("out before the key's call returned: %v", got)
				}
				close(release)
				synctest.Wait()
				got := out.Values()
				_ = stop()
				if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
					t.Errorf("out after the key's call returned: %v, want [0 1 2 3 4]", got)
				}
			})
		})
	}
}

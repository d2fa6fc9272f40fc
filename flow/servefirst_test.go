package flow_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// levelsOf sends vs, each at the level levelOf gives and keyed by itself,
// the first on its own, the others once started is closed, in two
// batches: up to 5, and after.
func levelsOf(vs []int, levelOf func(int) uint8, started <-chan struct{}) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for i, v := range vs {
			m := stream.NewMessage(v, stream.Handle{})
			m.Priority, m.Key = levelOf(v), []byte{byte(v)}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
			if i == 0 || v == 5 {
				if err := out.Flush(ctx); err != nil {
					return err
				}
			}
			if i == 0 {
				<-started
			}
			if v == 5 {
				time.Sleep(time.Millisecond) // the stage takes in the first batch
			}
		}
		return nil
	})
}

// Messages ServeFirst picks (a replay that waited its turn once already)
// are called before the others waiting at their level, in their arrival
// order, and never before a higher level's: one slot, held by 0's call
// while 1 to 5 arrive, then 6 to 9, which are picked. Without lanes they go before
// every other message waiting; with lanes, 1 and 2 are level 0, the
// rest level 1.
func TestServeFirstGoesAheadOfItsLevel(t *testing.T) {
	picked := func(v int) bool { return v >= 6 }
	cases := []struct {
		name string
		opts []flow.AsyncOption
		want []int
	}{
		{"unordered", nil, []int{0, 6, 7, 8, 9, 1, 2, 3, 4, 5}},
		{"keyed", []flow.AsyncOption{flow.ByMessageKey()}, []int{0, 6, 7, 8, 9, 1, 2, 3, 4, 5}},
		{"lanes", []flow.AsyncOption{flow.Lanes(backpressure.StrictPriority(2))}, []int{0, 1, 2, 6, 7, 8, 9, 3, 4, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release, started := make(chan struct{}), make(chan struct{})
				var mu sync.Mutex
				var order []int
				opts := append([]flow.AsyncOption{flow.Window(16), flow.ServeFirst(picked)}, c.opts...)
				a := flow.MapAsync(1, func(ctx context.Context, x int) (int, error) {
					mu.Lock()
					order = append(order, x)
					mu.Unlock()
					if x == 0 {
						close(started)
						<-release
					}
					return x, nil
				}, opts...)
				g := stream.New()
				levelOf := func(v int) uint8 {
					if v <= 2 {
						return 0
					}
					return 1
				}
				stream.To(stream.Via(stream.From(g, levelsOf([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, levelOf, started)), a), sink.Discard[int]())
				done := make(chan error, 1)
				go func() { done <- g.Run(context.Background()) }()
				time.Sleep(time.Second)
				synctest.Wait() // 0 holds the slot, the others wait
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(order, c.want) {
					t.Errorf("called in the order %v, want %v", order, c.want)
				}
			})
		})
	}
}

// ServeFirst's function must take the stage's input: the graph refuses to
// start otherwise, naming both types.
func TestServeFirstOfAnotherTypeIsRefused(t *testing.T) {
	a := flow.MapAsync(1, func(ctx context.Context, x int) (int, error) { return x, nil }, flow.ServeFirst(func(string) bool { return true }))
	err := a.Validate()
	var ce *stream.ConfigError
	if !errors.As(err, &ce) || ce.Argument != "ServeFirst" || !strings.Contains(err.Error(), "func(int) bool") {
		t.Fatalf("Validate: %v, want a ConfigError on ServeFirst naming func(int) bool", err)
	}
}

// A retry has waited its turn once already too: when its backoff ends it
// is called before the messages that arrived meanwhile and wait for a
// slot, not behind them — its wait in the queue would count against its
// time budget (MaxElapsed) and park it for nothing. One slot: 0 fails
// once (retried 10 ms later) while 1 to 5 arrive; 0's retry is the next
// call once 1's call, which took the slot meanwhile, returns.
func TestRetryGoesAheadOfTheMessagesWaiting(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []flow.AsyncOption
	}{{"unordered", nil}, {"lanes", []flow.AsyncOption{flow.Lanes(backpressure.StrictPriority(2))}}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				started := make(chan struct{})
				var mu sync.Mutex
				var order []int
				failed := false
				p := flow.Interactive()
				p.BaseDelay, p.Jitter, p.MaxElapsed = 10*time.Millisecond, flow.NoJitter, time.Minute
				opts := append([]flow.AsyncOption{flow.Window(16), flow.Retry(p)}, c.opts...)
				a := flow.MapAsync(1, func(ctx context.Context, x int) (int, error) {
					mu.Lock()
					order = append(order, x)
					first := x == 0 && !failed
					failed = failed || x == 0
					mu.Unlock()
					if first {
						close(started)
						return 0, stream.Transient(errors.New("try again"))
					}
					time.Sleep(time.Second)
					return x, nil
				}, opts...)
				g := stream.New()
				stream.To(stream.Via(stream.From(g, levelsOf([]int{0, 1, 2, 3, 4, 5}, func(int) uint8 { return 1 }, started)), a), sink.Discard[int]())
				if err := g.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				if want := []int{0, 1, 0, 2, 3, 4, 5}; !slices.Equal(order, want) {
					t.Errorf("called in the order %v, want %v", order, want)
				}
			})
		})
	}
}

// A panic in ServeFirst's function fails that message, as one in a key
// function does, and the stage goes on with the others.
func TestServeFirstPanicFailsTheMessage(t *testing.T) {
	a := flow.MapAsync(2, func(ctx context.Context, x int) (int, error) { return x, nil },
		flow.Lanes(backpressure.StrictPriority(1)), flow.ServeFirst(func(x int) bool {
			if x == 3 {
				panic("bad pick")
			}
			return x%2 == 0
		}))
	g := stream.New()
	out := sink.Collect[int]()
	var mu sync.Mutex
	var failed []stream.Failure
	s := stream.Via(stream.From(g, levelsOf([]int{0, 1, 2, 3, 4, 5}, func(int) uint8 { return 0 }, closedChan())), a)
	stream.To(s, out)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		mu.Lock()
		failed = append(failed, m.Value)
		mu.Unlock()
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.Values()
	slices.Sort(got)
	var pe *stream.PanicError
	if !slices.Equal(got, []int{0, 1, 2, 4, 5}) || len(failed) != 1 || !errors.As(failed[0].Err, &pe) || failed[0].Value != 3 {
		t.Fatalf("out %v, failures %v: want all but 3 out, 3 failed with its panic", got, failed)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

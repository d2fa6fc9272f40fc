package flow_test

import (
	"context"
	"fmt"
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

// A call starts within the limit, but for a change made as it was being
// taken (the current limit or the one before), never beyond the
// parallelism, and nothing wedges as the limit moves down to 1 and up.
// With a limit the workers read from the stage (834b6e9) they started
// calls under limits two or more changes old.
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
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- g.Run(ctx) }()
				time.Sleep(time.Hour)
				synctest.Wait()
				n := got.Load()
				cancel()
				<-done
				if n != 600 {
					t.Fatalf("%d of 600 results: wedged (stats %+v)", n, a.Stats())
				}
				if peak.Load() > 8 || overBoth.Load() > 0 {
					t.Fatalf("peak %d, %d calls beyond both the last two limits", peak.Load(), overBoth.Load())
				}
				t.Logf("%d calls started beyond the current limit (a change not seen yet), peak %d", overCur.Load(), peak.Load())
				checkSettled(t, tr)
			})
		})
	}
}

package flow_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// goroutineID is the id of the calling goroutine, from its stack's header
// ("goroutine 123 [running]:").
func goroutineID() int {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.Atoi(string(b[:bytes.IndexByte(b, ' ')]))
	return id
}

// After a burst grew the pool, calls made one at a time are taken by the
// worker that went idle last, not by each parked worker in turn: a worker
// parked long enough has its stack shrunk by the garbage collector, and
// its next call grows it again.
func TestMapAsyncWakesTheLastIdleWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burst, trickle = 32, 100
		var (
			mu      sync.Mutex
			started int
			all     = make(chan struct{})
			workers = map[int]bool{} // the goroutines of the trickle's calls
			calls   atomic.Int64
		)
		a := flow.MapAsync(burst, func(ctx context.Context, x int) (int, error) {
			mu.Lock()
			if x < burst {
				// The burst's calls all wait for each other: the pool
				// grows to one worker per call.
				if started++; started == burst {
					close(all)
				}
				mu.Unlock()
				<-all
				return x, nil
			}
			workers[goroutineID()] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return x, nil
		})
		got := make(chan int)
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			send := func(i int) error {
				if err := out.Send(ctx, stream.NewMessage(i, stream.Handle{})); err != nil {
					return err
				}
				return out.Flush(ctx)
			}
			recv := func() {
				select {
				case <-got:
				case <-ctx.Done():
				}
			}
			for i := range burst {
				if err := send(i); err != nil {
					return err
				}
			}
			for range burst {
				recv()
			}
			synctest.Wait() // every worker of the burst parked
			for i := range trickle {
				if err := send(burst + i); err != nil {
					return err
				}
				recv()
				calls.Add(1)
			}
			<-ctx.Done()
			return nil
		})
		g := stream.New()
		stream.To(stream.Via(stream.From(g, src), a), sink.Func(func(ctx context.Context, x int) error {
			select {
			case got <- x:
			case <-ctx.Done():
			}
			return nil
		}))
		stop := start(g)
		time.Sleep(time.Second)
		synctest.Wait()
		_ = stop()
		mu.Lock()
		defer mu.Unlock()
		if calls.Load() != trickle {
			t.Fatalf("%d calls of the %d made one at a time returned", calls.Load(), trickle)
		}
		if len(workers) > 4 {
			t.Fatalf("%d calls made one at a time after a burst of %d ran on %d workers, want at most 4", trickle, burst, len(workers))
		}
	})
}

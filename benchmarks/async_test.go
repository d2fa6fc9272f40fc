package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

const (
	asyncParallelism = 256
	asyncLatency     = 2 * time.Millisecond
)

// callClock sums the latency the simulated calls really had, measured inside
// them: timers overshoot on these machines, so the honest bound on an async
// stage is parallelism / observed latency, not / nominal latency.
type callClock struct {
	total atomic.Int64
	n     atomic.Int64
}

func (c *callClock) sleep(d time.Duration) {
	t0 := time.Now()
	time.Sleep(d)
	c.total.Add(int64(time.Since(t0)))
	c.n.Add(1)
}

func (c *callClock) mean() time.Duration {
	if c.n.Load() == 0 {
		return 0
	}
	return time.Duration(c.total.Load() / c.n.Load())
}

// latencies records per-message latencies from stamp to sink.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) p(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(q*float64(len(l.d))))]
}

// asyncRun pushes n messages through stamp -> MapAsync -> sink and returns
// the elapsed time. The sink records each message's time since the stamp.
func asyncRun(b *testing.B, n int, a stream.Flow[int, int], lat *latencies, check func(stream.Message[int]) error) time.Duration {
	b.Helper()
	g := stream.New()
	s := stream.From(g, source.Slice(make([]int, n)))
	s = stream.Via(s, stream.FlowFunc[int, int](func(ctx context.Context, in *stream.Inlet[int], out *stream.Outlet[int]) error {
		// stamp: set each message's Value to its index and Timestamp to now
		// as it enters the async stage's input.
		i := 0
		for {
			bt, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			now := time.Now()
			for _, m := range bt.Items {
				m.Value, m.Timestamp = i, now
				i++
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			bt.Release()
		}
	}))
	// A small input buffer, so that the latency measured is the stage's own,
	// not the wait in a long queue in front of it.
	s = stream.Via(s, a, stream.Buffer(asyncParallelism))
	stream.To(s, stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		for {
			bt, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			now := time.Now()
			for i := range bt.Items {
				m := &bt.Items[i]
				if lat != nil {
					lat.add(now.Sub(m.Timestamp))
				}
				if check != nil {
					if err := check(*m); err != nil {
						return err
					}
				}
				in.Settle(m, stream.Completed)
			}
			bt.Release()
		}
	}))
	t0 := time.Now()
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkMapAsync measures MapAsync against Little's law: throughput <=
// parallelism / latency. efficiency is achieved throughput over that bound
// with the latency the calls really had; nominal_ratio uses the nominal
// 2 ms.
// reportCPU reports cpu_us/msg: the process's CPU time (user + system,
// getrusage) since cpu0 per message, what the stage costs beside the
// calls' own waiting.
func reportCPU(b *testing.B, cpu0 time.Duration, msgs int) {
	if msgs > 0 {
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1000/float64(msgs), "cpu_us/msg")
	}
}

func BenchmarkMapAsync(b *testing.B) {
	const n = 60_000
	bound := func(b *testing.B, msgs int, el time.Duration, clk *callClock) {
		tput := float64(msgs) / el.Seconds()
		b.ReportMetric(tput, "msgs/s")
		b.ReportMetric(tput/(asyncParallelism/clk.mean().Seconds()), "efficiency")
		b.ReportMetric(tput/(asyncParallelism/asyncLatency.Seconds()), "nominal_ratio")
		b.ReportMetric(float64(clk.mean().Microseconds())/1000, "call_ms")
		b.ReportMetric(0, "ns/op")
	}
	// measure runs n messages per iteration through run, which returns
	// the time they took, and reports CPU and the bound.
	measure := func(b *testing.B, run func(clk *callClock) time.Duration) {
		var clk callClock
		var el time.Duration
		msgs := 0
		cpu0 := cpuTime()
		for b.Loop() {
			el += run(&clk)
			msgs += n
		}
		reportCPU(b, cpu0, msgs)
		bound(b, msgs, el, &clk)
	}

	b.Run("bare_goroutines", func(b *testing.B) {
		// The reference: 256 goroutines sleeping 2 ms in a loop, no pipeline.
		measure(b, func(clk *callClock) time.Duration {
			var next atomic.Int64
			var wg sync.WaitGroup
			t0 := time.Now()
			for range asyncParallelism {
				wg.Go(func() {
					for next.Add(1) <= n {
						clk.sleep(asyncLatency)
					}
				})
			}
			wg.Wait()
			return time.Since(t0)
		})
	})

	b.Run("hand_pool", func(b *testing.B) {
		// The same calls through a pipeline written by hand, the
		// "why not write it myself" reference: a producer feeds 256
		// goroutines through a buffered channel with room for 2x (the
		// stage's window), and each sends its result to a consumer through
		// another. No settling, retries or statistics.
		measure(b, func(clk *callClock) time.Duration {
			in := make(chan int, 2*asyncParallelism)
			out := make(chan int, 2*asyncParallelism)
			var wg sync.WaitGroup
			t0 := time.Now()
			go func() {
				for i := range n {
					in <- i
				}
				close(in)
			}()
			for range asyncParallelism {
				wg.Go(func() {
					for x := range in {
						clk.sleep(asyncLatency)
						out <- x
					}
				})
			}
			go func() { wg.Wait(); close(out) }()
			got := 0
			for range out {
				got++
			}
			if got != n {
				b.Fatalf("%d results of %d messages", got, n)
			}
			return time.Since(t0)
		})
	})

	b.Run("unordered", func(b *testing.B) {
		measure(b, func(clk *callClock) time.Duration {
			a := flow.MapAsync(asyncParallelism, func(_ context.Context, x int) (int, error) {
				clk.sleep(asyncLatency)
				return x, nil
			})
			return asyncRun(b, n, a, nil, nil)
		})
	})

	b.Run("noop", func(b *testing.B) {
		// Per-message overhead: a call that does nothing, parallelism 64, no
		// latency stamp.
		const m = 1_000_000
		var el time.Duration
		msgs := 0
		cpu0 := cpuTime()
		for b.Loop() {
			g := stream.New()
			s := stream.Via(stream.From(g, source.Slice(make([]int, m))),
				flow.MapAsync(64, func(_ context.Context, x int) (int, error) { return x, nil }))
			stream.To(s, sink.Discard[int]())
			t0 := time.Now()
			if err := g.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
			el += time.Since(t0)
			msgs += m
		}
		reportCPU(b, cpu0, msgs)
		b.ReportMetric(float64(msgs)/el.Seconds(), "msgs/s")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("sparse_hangs", func(b *testing.B) {
		// Nearly all calls instant, one in 1,000 hanging until its
		// CallTimeout of 100 ms, parallelism 64: the stage batches instant
		// calls, and what is batched behind a hang waits for it (see
		// docs/benchmarks.md). vs_ideal is the run's time over the hangs' own, 64 at
		// a time.
		const m, every, timeout = 200_000, 1000, 100 * time.Millisecond
		var el time.Duration
		msgs := 0
		cpu0 := cpuTime()
		for b.Loop() {
			g := stream.New()
			s := stream.Via(stream.From(g, source.Slice(make([]int, m))), stream.FlowFunc[int, int](
				func(ctx context.Context, in *stream.Inlet[int], out *stream.Outlet[int]) error {
					i := 0
					for {
						bt, err := in.Recv(ctx)
						if err != nil {
							return nil
						}
						for _, msg := range bt.Items {
							msg.Value = i
							i++
							if err := out.Send(ctx, msg); err != nil {
								return err
							}
						}
						bt.Release()
					}
				}))
			s = stream.Via(s, flow.MapAsync(64, func(ctx context.Context, x int) (int, error) {
				if x%every == every-1 {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				return x, nil
			}, flow.CallTimeout(timeout)))
			stream.To(s, sink.Discard[int]())
			var failed atomic.Int64
			stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
				failed.Add(1)
				return nil
			}))
			t0 := time.Now()
			if err := g.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
			el += time.Since(t0)
			msgs += m
			if failed.Load() != m/every {
				b.Fatalf("%d calls timed out, want %d", failed.Load(), m/every)
			}
		}
		reportCPU(b, cpu0, msgs)
		b.ReportMetric(float64(msgs)/el.Seconds(), "msgs/s")
		ideal := time.Duration((m/every+63)/64) * timeout * time.Duration(msgs/m)
		b.ReportMetric(el.Seconds()/ideal.Seconds(), "vs_ideal")
		b.ReportMetric(0, "ns/op")
	})

	tail := func(b *testing.B, opts ...flow.AsyncOption) {
		var clk callClock
		var lat latencies
		var el time.Duration
		msgs := 0
		cpu0 := cpuTime()
		for b.Loop() {
			a := flow.MapAsync(asyncParallelism, func(_ context.Context, x int) (int, error) {
				if x%100 == 0 { // 1% of calls take 50 ms
					clk.sleep(50 * time.Millisecond)
				} else {
					clk.sleep(asyncLatency)
				}
				return x, nil
			}, opts...)
			el += asyncRun(b, n, a, &lat, nil)
			msgs += n
		}
		reportCPU(b, cpu0, msgs)
		b.ReportMetric(float64(msgs)/el.Seconds(), "msgs/s")
		b.ReportMetric(float64(lat.p(0.50).Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(lat.p(0.99).Microseconds())/1000, "p99_ms")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("ordered_tail", func(b *testing.B) { tail(b, flow.InOrder()) })
	b.Run("unordered_tail", func(b *testing.B) { tail(b) })

	b.Run("keyed", func(b *testing.B) {
		const keys = 10_000
		measure(b, func(clk *callClock) time.Duration {
			// Keys are drawn at random per message; the sink checks that each
			// key's messages arrive in input order.
			rng := rand.New(rand.NewPCG(1, 2))
			keyOf := make([]int32, n)
			for i := range keyOf {
				keyOf[i] = int32(rng.IntN(keys))
			}
			lastSeen := make([]int, keys)
			for i := range lastSeen {
				lastSeen[i] = -1
			}
			a := flow.MapAsyncByKey(asyncParallelism, func(m *stream.Message[int]) string { return fmt.Sprint(keyOf[m.Value]) },
				func(_ context.Context, x int) (int, error) {
					clk.sleep(asyncLatency)
					return x, nil
				})
			return asyncRun(b, n, a, nil, func(m stream.Message[int]) error {
				k := keyOf[m.Value]
				if lastSeen[k] > m.Value {
					return fmt.Errorf("key %d: message %d after %d", k, m.Value, lastSeen[k])
				}
				lastSeen[k] = m.Value
				return nil
			})
		})
	})
}

// queueService models a service with 64 workers and a FIFO queue: a call
// waits for a worker, then takes 2 ms. Past 64 calls in flight, latency
// grows with the queue.
type queueService struct {
	workers chan struct{}
}

func newQueueService() *queueService {
	return &queueService{workers: make(chan struct{}, 64)}
}

func (s *queueService) call(ctx context.Context) error {
	select {
	case s.workers <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(asyncLatency)
	<-s.workers
	return nil
}

// BenchmarkAdaptive compares a fixed parallelism of 512 with the adaptive
// limiter in front of a service that saturates at 64 calls in flight.
// "unloaded" first measures the service at 32 calls in flight (no queue):
// its p50 is the service's unloaded latency on this machine, timer
// overshoot included, and the adaptive run reports its p99 as a multiple
// of it (p99_vs_unloaded). The adaptive limiter runs on its default target,
// twice the lowest median latency it observes.
func BenchmarkAdaptive(b *testing.B) {
	const n = 40_000
	var unloaded time.Duration
	for _, mode := range []string{"unloaded", "fixed512", "adaptive"} {
		b.Run(mode, func(b *testing.B) {
			var lat latencies // per-call latency as the caller sees it
			var el time.Duration
			var lim *backpressure.Adaptive
			msgs := 0
			for b.Loop() {
				svc := newQueueService()
				fn := func(ctx context.Context, x int) (int, error) {
					t0 := time.Now()
					err := svc.call(ctx)
					lat.add(time.Since(t0))
					return x, err
				}
				var a stream.Flow[int, int]
				switch mode {
				case "unloaded":
					a = flow.MapAsync(32, fn)
				case "fixed512":
					a = flow.MapAsync(512, fn)
				case "adaptive":
					var err error
					lim, err = backpressure.NewAdaptive(backpressure.AdaptiveConfig{Initial: 16, Max: 512})
					if err != nil {
						b.Fatal(err)
					}
					a = flow.MapAsync(512, fn, flow.WithLimiter(lim))
				}
				el += asyncRun(b, n, a, nil, nil)
				msgs += n
			}
			b.ReportMetric(float64(msgs)/el.Seconds(), "msgs/s")
			b.ReportMetric(float64(lat.p(0.50).Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(lat.p(0.99).Microseconds())/1000, "p99_ms")
			switch {
			case mode == "unloaded":
				unloaded = lat.p(0.50)
			case unloaded > 0:
				b.ReportMetric(float64(lat.p(0.99))/float64(unloaded), "p99_vs_unloaded")
			}
			if lim != nil {
				b.ReportMetric(float64(lim.Stats().Limit), "final_limit")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

package flow_test

import (
	"context"
	"errors"
	"fmt"
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

// failureLog is a dead letter that keeps the failures.
type failureLog struct {
	mu sync.Mutex
	fs []stream.Failure
}

func (l *failureLog) sink() sink.DeadLetter {
	return sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		l.mu.Lock()
		l.fs = append(l.fs, m.Value)
		l.mu.Unlock()
		return nil
	})
}

// panics returns the values of the failures whose reason is a panic, and
// how many failed otherwise.
func (l *failureLog) panics() (values []any, others int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fs {
		var pe *stream.PanicError
		if errors.As(f.Err, &pe) {
			values = append(values, f.Value)
		} else {
			others++
		}
	}
	return values, others
}

// runInts runs 0..n-1 through f and returns what came out, with the
// failures; Run must return nil and every message must be settled once.
func runInts(t *testing.T, n int, f stream.Flow[int, int]) ([]int, *failureLog) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(n), source.Track(tr))), f), out)
	var l failureLog
	stream.To(g.Failures(), l.sink())
	run(t, g)
	checkSettled(t, tr)
	return out.Values(), &l
}

// onlyPanicked checks that the one failure is a panic, of value want when
// want is not nil, and that every other message came out.
func onlyPanicked(t *testing.T, n int, out []int, l *failureLog, want any) {
	t.Helper()
	vs, others := l.panics()
	if len(vs) != 1 || others != 0 || want != nil && vs[0] != want || len(out) != n-1 {
		t.Fatalf("%d out of %d; panicked %v, other failures %d; want one panic (of %v) and the rest out", len(out), n, vs, others, want)
	}
}

func TestDelayDuePanicFailsOnlyThatMessage(t *testing.T) {
	due := func(e *stream.Envelope) time.Time {
		if e.Offset == 7 {
			panic("due bug")
		}
		return time.Time{}
	}
	out, l := runInts(t, 20, flow.Delay[int](due))
	onlyPanicked(t, 20, out, l, 7)
}

func TestMapAsyncByKeyPanicFailsOnlyThatMessage(t *testing.T) {
	for _, mode := range []string{"ByKey", "MaxPerPartition"} {
		t.Run(mode, func(t *testing.T) {
			key := func(m *stream.Message[int]) string {
				if m.Value == 7 {
					panic("key bug")
				}
				return fmt.Sprint(m.Value % 3)
			}
			call := func(_ context.Context, x int) (int, error) { return x, nil }
			a := flow.MapAsyncByKey(4, key, call)
			if mode == "MaxPerPartition" {
				// Its key is the stage's own and cannot panic: the control.
				a = flow.MapAsync(4, call, flow.MaxPerPartition(2))
			}
			out, l := runInts(t, 50, a)
			if mode == "MaxPerPartition" {
				if vs, others := l.panics(); len(vs)+others != 0 || len(out) != 50 {
					t.Fatalf("%d out, failures %v %d", len(out), vs, others)
				}
				return
			}
			onlyPanicked(t, 50, out, l, 7)
		})
	}
}

// panicOn is a counter that panics when it reaches the nth call.
type panicOn struct {
	n     int64
	calls atomic.Int64
	what  string
}

func (p *panicOn) tick() {
	if p.calls.Add(1) == p.n {
		panic(p.what)
	}
}

// limiter is a backpressure.Limiter whose Observe panics once.
type limiter struct{ p *panicOn }

func (l limiter) Limit() int                  { return 4 }
func (l limiter) Observe(backpressure.Sample) { l.p.tick() }

// TestMapAsyncCallbackPanicsFailOnlyThatMessage: a panic in a callback
// MapAsync calls for a message (classifier, metrics hooks, a limiter) fails
// that message; the pipeline, and the process, go on. Slow calls run on
// worker goroutines, fast ones mostly on the stage's own.
func TestMapAsyncCallbackPanicsFailOnlyThatMessage(t *testing.T) {
	const n = 100
	bad := errors.New("bad input")
	cases := []struct {
		name string
		opts func() []flow.AsyncOption
		fn   func() func(x int) error // makes the call's error for x
		want any                      // the value that must fail, if known
	}{
		{name: "Classifier", want: 50,
			fn: func() func(int) error {
				return func(x int) error {
					if x == 50 {
						return bad
					}
					return nil
				}
			},
			opts: func() []flow.AsyncOption {
				return []flow.AsyncOption{flow.Classifier(func(err error) stream.Classification {
					if errors.Is(err, bad) {
						panic("classifier bug")
					}
					return stream.Classify(err)
				})}
			}},
		{name: "Classifier/Breaker", want: 50,
			fn: func() func(int) error {
				return func(x int) error {
					if x == 50 {
						return bad
					}
					return nil
				}
			},
			opts: func() []flow.AsyncOption {
				// The classifier panics before the breaker heard of the
				// call: callPanicked tells it (the breaker never opens).
				b, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 1000})
				if err != nil {
					panic(err)
				}
				return []flow.AsyncOption{flow.Breaker(b), flow.Classifier(func(err error) stream.Classification {
					if errors.Is(err, bad) {
						panic("classifier bug")
					}
					return stream.Classify(err)
				})}
			}},
		{name: "OnCall", opts: func() []flow.AsyncOption {
			p := &panicOn{n: 50, what: "metrics bug"}
			return []flow.AsyncOption{flow.OnCall(func(flow.CallInfo) { p.tick() })}
		}},
		{name: "Limiter.Observe", opts: func() []flow.AsyncOption {
			return []flow.AsyncOption{flow.WithLimiter(limiter{&panicOn{n: 50, what: "limiter bug"}})}
		}},
		{name: "OnDone", opts: func() []flow.AsyncOption {
			p := &panicOn{n: 50, what: "metrics bug"}
			return []flow.AsyncOption{flow.OnDone(func(flow.DoneInfo) { p.tick() })}
		}},
		{name: "OnDone/InOrder", opts: func() []flow.AsyncOption {
			p := &panicOn{n: 50, what: "metrics bug"}
			return []flow.AsyncOption{flow.InOrder(), flow.OnDone(func(flow.DoneInfo) { p.tick() })}
		}},
		{name: "OnRetry", want: 50,
			fn: func() func(int) error { return retryOnce(50) },
			opts: func() []flow.AsyncOption {
				return []flow.AsyncOption{flow.Retry(flow.RetryPolicy{Strategy: flow.Immediate, Jitter: flow.NoJitter, MaxAttempts: 2}),
					flow.OnRetry(func(flow.RetryInfo) { panic("metrics bug") })}
			}},
	}
	for _, c := range cases {
		for _, speed := range []string{"slow", "fast"} {
			t.Run(c.name+"/"+speed, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fail := func(int) error { return nil }
					if c.fn != nil {
						fail = c.fn()
					}
					fn := func(_ context.Context, x int) (int, error) {
						if speed == "slow" {
							time.Sleep(time.Millisecond)
						}
						if err := fail(x); err != nil {
							return 0, err
						}
						return x, nil
					}
					out, l := runInts(t, n, flow.MapAsync(4, fn, c.opts()...))
					onlyPanicked(t, n, out, l, c.want)
				})
			})
		}
	}
}

// retryOnce fails x's first call transiently.
func retryOnce(x int) func(int) error {
	var tried atomic.Bool
	return func(v int) error {
		if v == x && !tried.Swap(true) {
			return stream.Transient(errors.New("flaky"))
		}
		return nil
	}
}

// TestMapAsyncBreakerStateChangePanicFailsThatMessage: the breaker tells
// OnStateChange of the transition a call's outcome caused, on the goroutine
// that made the call. The first call fails and opens the breaker; the
// others are refused while it is open.
func TestMapAsyncBreakerStateChangePanicFailsThatMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 1, FailureRatio: 1,
			OnStateChange: func(_ string, _, to backpressure.BreakerState) {
				if to == backpressure.Open {
					panic("alerting bug")
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		fn := func(_ context.Context, x int) (int, error) {
			time.Sleep(time.Millisecond)
			if x == 0 {
				return 0, stream.Transient(errors.New("service down"))
			}
			return x, nil
		}
		out, l := runInts(t, 40, flow.MapAsync(1, fn, flow.Breaker(b)))
		vs, others := l.panics()
		if len(vs) != 1 || vs[0] != 0 || len(out)+others != 39 {
			t.Fatalf("%d out, panicked %v, other failures %d: want 0 failed with the panic", len(out), vs, others)
		}
		if b.State() != backpressure.Open {
			t.Fatalf("breaker %v: the transition must have happened", b.State())
		}
	})
}

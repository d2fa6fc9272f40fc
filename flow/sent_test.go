package flow_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/pipenet"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// runSent runs n messages through MapAsync(n, fn, opts...) and returns how
// many succeeded and the errors of those that failed.
func runSent(t *testing.T, n int, fn func(context.Context, int) (int, error), opts ...flow.AsyncOption) (int, []error) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(n), source.Track(tr))),
		flow.MapAsync(n, fn, opts...)), out)
	var mu sync.Mutex
	var errs []error
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		mu.Lock()
		errs = append(errs, m.Value.Err)
		mu.Unlock()
		return nil
	}))
	run(t, g)
	checkSettled(t, tr)
	return len(out.Values()), errs
}

// attemptTimeouts are the two ways to bound an attempt: the stage's
// CallTimeout and the retry policy's AttemptTimeout (one attempt, so that
// a timeout fails the message at once).
func attemptTimeouts(d time.Duration) map[string]flow.AsyncOption {
	p := flow.Interactive()
	p.MaxAttempts, p.AttemptTimeout = 1, d
	return map[string]flow.AsyncOption{"CallTimeout": flow.CallTimeout(d), "AttemptTimeout": flow.Retry(p)}
}

// A call that waits ten timeouts before it sends (for a connection, a
// CPU) and then answers in time succeeds when its clock starts at the
// send; timed from its start, it fails with ErrCallTimeout.
func TestTimeoutFromSendIgnoresTheWaitBeforeSending(t *testing.T) {
	for name, timeout := range attemptTimeouts(20 * time.Millisecond) {
		for _, fromSend := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fromSend=%v", name, fromSend), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fn := func(ctx context.Context, x int) (int, error) {
						select {
						case <-time.After(200 * time.Millisecond): // the worker's own queueing
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						flow.Sent(ctx)
						select {
						case <-time.After(5 * time.Millisecond): // the service, in time
							return x, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					}
					opts := []flow.AsyncOption{timeout}
					if fromSend {
						opts = append(opts, flow.TimeoutFromSend())
					}
					ok, errs := runSent(t, 10, fn, opts...)
					if fromSend {
						if ok != 10 {
							t.Fatalf("%d of 10 succeeded, failures %v", ok, errs)
						}
						return
					}
					if ok != 0 || len(errs) != 10 || !errors.Is(errs[0], flow.ErrCallTimeout) {
						t.Fatalf("timed from the start: %d succeeded, failures %v; want all timed out", ok, errs)
					}
				})
			})
		}
	}
}

// A call that sends and then outlives its timeout fails as before: with
// ErrCallTimeout and DeadlineExceeded, exactly one timeout after its send,
// and counted in Stats.Timeouts.
func TestTimeoutFromSendCutsASlowService(t *testing.T) {
	for name, timeout := range attemptTimeouts(20 * time.Millisecond) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var after []time.Duration
				fn := func(ctx context.Context, x int) (int, error) {
					time.Sleep(200 * time.Millisecond)
					flow.Sent(ctx)
					sent := time.Now()
					<-ctx.Done() // a service that never answers
					mu.Lock()
					after = append(after, time.Since(sent))
					mu.Unlock()
					return 0, ctx.Err()
				}
				a := flow.MapAsync(10, fn, timeout, flow.TimeoutFromSend())
				g := stream.New()
				stream.To(stream.Via(stream.From(g, source.Slice(ints(10))), a), sink.Discard[int]())
				var errs []error
				stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
					errs = append(errs, m.Value.Err)
					return nil
				}))
				run(t, g)
				if len(errs) != 10 {
					t.Fatalf("%d failures, want 10", len(errs))
				}
				for _, err := range errs {
					if !errors.Is(err, flow.ErrCallTimeout) || !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("failure %v, want ErrCallTimeout and DeadlineExceeded", err)
					}
				}
				for _, d := range after {
					if d < 20*time.Millisecond || d > 21*time.Millisecond {
						t.Fatalf("a call was cut %v after its send, want 20 ms", d)
					}
				}
				if st := a.Stats(); st.Timeouts != 10 {
					t.Fatalf("stats %+v", st)
				}
			})
		})
	}
}

// A call that never says it was sent has no attempt timeout, and still
// ends when the pipeline stops; its message stays unsettled.
func TestTimeoutFromSendUnsentCallEndsWithThePipeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan error, 1)
		fn := func(ctx context.Context, x int) (int, error) {
			<-ctx.Done() // waits for ever for a connection
			ended <- ctx.Err()
			return 0, ctx.Err()
		}
		g := stream.New(stream.WithDrainTimeout(time.Second))
		s := stream.Via(stream.From(g, source.Slice(ints(1), source.Track(tr))),
			flow.MapAsync(1, fn, flow.CallTimeout(20*time.Millisecond), flow.TimeoutFromSend()))
		stream.To(s, sink.Discard[int]())
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		time.Sleep(time.Hour)
		var early error
		select {
		case early = <-ended:
		default:
		}
		cancel()
		runErr := <-done
		if early != nil {
			t.Fatalf("an unsent call ended with %v before the pipeline stopped", early)
		}
		if !errors.Is(runErr, stream.ErrDrainTimeout) {
			t.Fatalf("Run = %v, want ErrDrainTimeout (the call outlived the drain)", runErr)
		}
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("the call ended with %v, want Canceled", err)
		}
		if st := tr.Stats(); st.Total() != 0 {
			t.Fatalf("settled %+v, want the message left for replay", st)
		}
	})
}

type recordingLimiter struct {
	mu      sync.Mutex
	samples []backpressure.Sample
}

func (l *recordingLimiter) Limit() int { return 64 }

func (l *recordingLimiter) Observe(s backpressure.Sample) {
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// OnCall and the limiter see the service's latency, from the send, and
// OnCall the wait before it apart; without the option, the whole call.
func TestTimeoutFromSendLatencyExcludesTheWait(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []flow.AsyncOption
		lat, waits time.Duration
	}{
		{"fromSend", []flow.AsyncOption{flow.TimeoutFromSend()}, 5 * time.Millisecond, 100 * time.Millisecond},
		{"fromSend+timeout", []flow.AsyncOption{flow.TimeoutFromSend(), flow.CallTimeout(50 * time.Millisecond)},
			5 * time.Millisecond, 100 * time.Millisecond},
		{"fromStart", nil, 105 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var calls []flow.CallInfo
				lim := &recordingLimiter{}
				fn := func(ctx context.Context, x int) (int, error) {
					time.Sleep(100 * time.Millisecond)
					flow.Sent(ctx)
					time.Sleep(5 * time.Millisecond)
					return x, nil
				}
				opts := append(tc.opts, flow.WithLimiter(lim), flow.OnCall(func(c flow.CallInfo) {
					mu.Lock()
					calls = append(calls, c)
					mu.Unlock()
				}))
				if ok, errs := runSent(t, 20, fn, opts...); ok != 20 {
					t.Fatalf("%d succeeded, failures %v", ok, errs)
				}
				if len(calls) != 20 || len(lim.samples) != 20 {
					t.Fatalf("%d OnCall, %d samples", len(calls), len(lim.samples))
				}
				for i, c := range calls {
					if c.Latency != tc.lat || c.Wait != tc.waits || lim.samples[i].Latency != tc.lat {
						t.Fatalf("OnCall %+v, limiter %+v; want latency %v, wait %v", c, lim.samples[i], tc.lat, tc.waits)
					}
				}
			})
		})
	}
}

// Sent and SentOnWrite do nothing outside a stage timed from send.
func TestSentOutsideAStageTimedFromSend(t *testing.T) {
	ctx := context.Background()
	flow.Sent(ctx)
	if flow.SentOnWrite(ctx) != ctx {
		t.Fatal("SentOnWrite wrapped a context no stage gave")
	}
	ok, errs := runSent(t, 4, func(ctx context.Context, x int) (int, error) {
		if flow.SentOnWrite(ctx) != ctx {
			return 0, errors.New("SentOnWrite wrapped the context of a stage timed from start")
		}
		flow.Sent(ctx)
		return x, nil
	}, flow.CallTimeout(time.Second))
	if ok != 4 {
		t.Fatal(errs)
	}
}

// Fifty concurrent HTTP calls share a pool of one connection to a service
// that takes 5 ms: the last waits about 250 ms for the connection. With a
// 50 ms attempt timeout timed from the write of the request, every call
// succeeds; timed from the start, most time out waiting for the pool.
//
// A real HTTP client and server, over in-memory connections inside a
// synctest bubble: on a shared machine, a 5 ms handler measured in real
// time sometimes takes 50 ms and more, which a test asserting "every call
// succeeds" cannot tell from a bug.
func TestSentOnWriteWithAPoolOfOne(t *testing.T) {
	for _, fromSend := range []bool{true, false} {
		t.Run(fmt.Sprintf("fromSend=%v", fromSend), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ln := pipenet.Listen()
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(5 * time.Millisecond)
					_, _ = io.WriteString(w, "ok")
				}))
				srv.Listener = ln
				srv.Start()
				defer srv.Close()
				tr := &http.Transport{DialContext: ln.Dial, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
				defer tr.CloseIdleConnections()
				cl := &http.Client{Transport: tr}
				fn := func(ctx context.Context, x int) (int, error) {
					req, err := http.NewRequestWithContext(flow.SentOnWrite(ctx), http.MethodGet, srv.URL, nil)
					if err != nil {
						return 0, err
					}
					resp, err := cl.Do(req)
					if err != nil {
						return 0, err
					}
					defer resp.Body.Close()
					if _, err := io.Copy(io.Discard, resp.Body); err != nil {
						return 0, err
					}
					return x, flow.CheckResponse(resp)
				}
				opts := []flow.AsyncOption{flow.CallTimeout(50 * time.Millisecond)}
				if fromSend {
					opts = append(opts, flow.TimeoutFromSend())
				}
				ok, errs := runSent(t, 50, fn, opts...)
				t.Logf("%d succeeded, %d failed", ok, len(errs))
				if fromSend {
					if ok != 50 {
						t.Fatalf("%d of 50 succeeded; first failures: %v", ok, errs[:min(3, len(errs))])
					}
					return
				}
				// One connection serves at most 10 calls of 5 ms in 50 ms.
				if len(errs) < 40 {
					t.Fatalf("timed from the start, only %d of 50 timed out", len(errs))
				}
				for _, err := range errs {
					if !errors.Is(err, flow.ErrCallTimeout) {
						t.Fatalf("failure %v, want ErrCallTimeout", err)
					}
				}
			})
		})
	}
}

// A context derived from SentOnWrite's — as the HTTP transport derives one
// for every request — ends with the call's context without a goroutine to
// watch it: before, each derived context started one (the trace's value
// hid the call context's AfterFunc), one more goroutine and select per
// HTTP call.
func TestSentOnWriteDerivesWithoutAGoroutine(t *testing.T) {
	t.Run("call's context", func(t *testing.T) {
		derivesWithoutAGoroutine(t, func(ctx context.Context) context.Context { return ctx })
	})
	// A value added to the call's context (a request's id, say) before
	// SentOnWrite: the context still ends exactly when the call's does.
	t.Run("with a value", func(t *testing.T) {
		derivesWithoutAGoroutine(t, func(ctx context.Context) context.Context { return context.WithValue(ctx, requestIDKey{}, "id") })
	})
	// Bounded as an HTTP client's timeout bounds a call (SentOnWriteWithin),
	// the bound released once the call returns.
	t.Run("bounded", func(t *testing.T) {
		derivesWithoutAGoroutine(t, func(ctx context.Context) context.Context {
			bounded, release := flow.SentOnWriteWithin(context.WithValue(ctx, requestIDKey{}, "id"), time.Minute)
			context.AfterFunc(ctx, release)
			return bounded
		})
	})
}

// requestIDKey keys a value a call adds to its context.
type requestIDKey struct{}

func derivesWithoutAGoroutine(t *testing.T, wrap func(context.Context) context.Context) {
	const n = 50
	release := make(chan struct{})
	var derived sync.WaitGroup
	derived.Add(n)
	var most int
	done := make(chan struct{})
	go func() {
		derived.Wait()
		most = runtime.NumGoroutine()
		close(release)
		close(done)
	}()
	before := runtime.NumGoroutine()
	ok, errs := runSent(t, n, func(ctx context.Context, x int) (int, error) {
		cctx, cancel := context.WithCancel(flow.SentOnWrite(wrap(ctx)))
		defer cancel()
		derived.Done()
		select {
		case <-release:
		case <-cctx.Done():
			return x, cctx.Err()
		}
		return x, nil
	}, flow.TimeoutFromSend(), flow.CallTimeout(time.Minute))
	<-done
	if ok != n || len(errs) != 0 {
		t.Fatalf("%d of %d calls succeeded: %v", ok, n, errs)
	}
	// n calls in flight hold n worker goroutines, the stage a few more; a
	// watcher per derived context would add n.
	if grew := most - before; grew >= n+n/2 {
		t.Fatalf("%d more goroutines with %d calls in flight, each with a derived context: a goroutine per derived context", grew, n)
	}
}

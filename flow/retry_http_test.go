package flow_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/faultserver"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func faultServer(t *testing.T) *faultserver.Server {
	t.Helper()
	s, err := faultserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// httpCall is a backend call the way a pipeline makes one: an idempotent
// PUT with the context's deadline, over a pooled client.
func httpCall(t *testing.T, base string) func(context.Context, int) (int, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return func(ctx context.Context, id int) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/deliveries/%d", base, id), nil)
		if err != nil {
			return 0, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return id, flow.CheckResponse(resp)
	}
}

type outcome struct {
	delivered, failed int
	transient         int
	reasons           map[stream.Reason]int64
	permanent         []string // the first few permanent failures' reasons
}

func runAgainst(t *testing.T, srv *faultserver.Server, n, parallelism int, p flow.RetryPolicy) outcome {
	t.Helper()
	a := flow.MapAsync(parallelism, httpCall(t, srv.URL), flow.Retry(p))
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(n))), a), out)
	var failed, transient atomic.Int64
	var mu sync.Mutex
	var permanent []string
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		failed.Add(1)
		if m.Value.Transient {
			transient.Add(1)
		} else {
			mu.Lock()
			if len(permanent) < 5 {
				permanent = append(permanent, fmt.Sprintf("%v (%T)", m.Value.Err, errors.Unwrap(m.Value.Err)))
			}
			mu.Unlock()
		}
		return nil
	}))
	// A bound against a hang, not a speed: 5,000 calls with retries under
	// the race detector took 30 s on a busy 2-core machine and 70 s on
	// one busier still, where a minute cut the run short.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return outcome{len(out.Values()), int(failed.Load()), int(transient.Load()), a.Stats().Retries, permanent}
}

func fastPolicy() flow.RetryPolicy {
	return flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.FullJitter, MaxAttempts: 6,
		BaseDelay: 10 * time.Millisecond, MaxDelay: 1500 * time.Millisecond,
		AttemptTimeout: 200 * time.Millisecond, HonorRetryAfter: true}
}

func TestFaultServerEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("drives every fault path of a real HTTP server, with its timeouts: make test runs it, -short does not")
	}
	for _, c := range []struct {
		fault     faultserver.Fault
		reason    stream.Reason
		permanent bool
	}{
		{faultserver.Unavailable, stream.ReasonThrottled, false}, // 503 with Retry-After
		{faultserver.Throttle, stream.ReasonThrottled, false},
		{faultserver.Hang, stream.ReasonTimeout, false},
		{faultserver.Reset, stream.ReasonConnection, false},
		{faultserver.Internal, "", true},
		{faultserver.BadRequest, "", true},
	} {
		t.Run(string(c.fault), func(t *testing.T) {
			srv := faultServer(t)
			srv.SetRetryAfter(time.Second)
			if c.permanent {
				srv.Set(c.fault)
				o := runAgainst(t, srv, 20, 8, fastPolicy())
				if o.delivered != 0 || o.failed != 20 || o.transient != 0 || srv.Calls() != 20 {
					t.Fatalf("%+v with %d calls: permanent errors must fail at once, unretried", o, srv.Calls())
				}
				return
			}
			// Half of the requests fail: every message gets through in the end.
			srv.SetRate(c.fault, 0.5)
			o := runAgainst(t, srv, 40, 8, fastPolicy())
			if o.delivered+o.transient != 40 || o.failed != o.transient || o.reasons[c.reason] == 0 {
				t.Fatalf("%+v: want every message delivered or parked, retries counted as %q", o, c.reason)
			}
			t.Logf("%s: %+v, server saw %v", c.fault, o, srv.ByFault())
		})
	}
}

func TestFaultServerDownThenUp(t *testing.T) {
	srv := faultServer(t)
	srv.SetRetryAfter(0)
	srv.DownFor(faultserver.Unavailable, 300*time.Millisecond)
	p := fastPolicy()
	p.MaxAttempts = 20
	o := runAgainst(t, srv, 100, 16, p)
	if o.delivered != 100 {
		t.Fatalf("%+v: every message should get through once the service is back", o)
	}
}

func TestFaultServerLoad1000Concurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 concurrent calls against a real HTTP server for seconds: make test runs it, -short does not")
	}
	srv := faultServer(t)
	srv.SetRetryAfter(0)
	srv.SetLatency(5 * time.Millisecond)
	srv.SetRate(faultserver.Unavailable, 0.2)
	p := fastPolicy()
	p.MaxAttempts = 10
	o := runAgainst(t, srv, 5000, 1000, p)
	if o.delivered+o.transient != 5000 || o.failed != o.transient {
		t.Fatalf("%+v: lost messages under 1,000 concurrent calls", o)
	}
	t.Logf("1,000 concurrent calls, 20%% failing: %+v, %d calls", o, srv.Calls())
}

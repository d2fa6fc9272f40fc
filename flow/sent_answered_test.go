package flow_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/pipenet"
)

// OnCall and the limiter see the service's latency, from the send to the
// answer: what the call does after it (here 20 ms) is not the service's.
// Without TimeoutFromSend, Answered does nothing.
func TestAnsweredEndsTheLatency(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []flow.AsyncOption
		lat  time.Duration
	}{
		{"fromSend", []flow.AsyncOption{flow.TimeoutFromSend()}, 5 * time.Millisecond},
		{"fromSend+timeout", []flow.AsyncOption{flow.TimeoutFromSend(), flow.CallTimeout(50 * time.Millisecond)}, 5 * time.Millisecond},
		{"fromStart", nil, 125 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fn := func(ctx context.Context, x int) (int, error) {
					time.Sleep(100 * time.Millisecond)
					flow.Sent(ctx)
					time.Sleep(2 * time.Millisecond)
					flow.Answered(ctx) // a first request's answer: the last one counts
					time.Sleep(3 * time.Millisecond)
					flow.Answered(ctx)
					time.Sleep(20 * time.Millisecond)
					return x, nil
				}
				checkLatency(t, fn, tc.opts, tc.lat)
			})
		})
	}
}

// SentOnWrite marks the answer when the response's first byte arrives:
// the latency is the service's 5 ms, not the 20 ms the call then takes.
func TestSentOnWriteMarksTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := getOnPipe(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(5 * time.Millisecond)
			_, _ = io.WriteString(w, "ok")
		}, 20*time.Millisecond) // the call's own work on the answer
		checkLatency(t, fn, []flow.AsyncOption{flow.TimeoutFromSend()}, 5*time.Millisecond)
	})
}

// checkLatency runs 20 calls of fn and checks that OnCall and the limiter
// saw lat for each.
func checkLatency(t *testing.T, fn func(context.Context, int) (int, error), opts []flow.AsyncOption, lat time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var calls []flow.CallInfo
	lim := &recordingLimiter{}
	opts = append(opts, flow.WithLimiter(lim), flow.OnCall(func(c flow.CallInfo) {
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
		if c.Latency != lat || lim.samples[i].Latency != lat {
			t.Fatalf("OnCall %+v, limiter %+v; want latency %v", c, lim.samples[i], lat)
		}
	}
}

// An interim response (103 Early Hints here; 102 Processing alike) is not
// the service's answer: the latency runs to the final response, 6 ms
// after the send (the interim one came after 1 ms).
func TestSentOnWriteAnswerIsTheFinalResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := getOnPipe(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Millisecond)
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			time.Sleep(5 * time.Millisecond)
			_, _ = io.WriteString(w, "ok")
		}, 0)
		checkLatency(t, fn, []flow.AsyncOption{flow.TimeoutFromSend()}, 6*time.Millisecond)
	})
}

// getOnPipe serves h on an in-memory network (inside a synctest bubble)
// and returns a call that GETs it through SentOnWrite, reads the answer,
// then works on it for work.
func getOnPipe(t *testing.T, h http.HandlerFunc, work time.Duration) func(context.Context, int) (int, error) {
	t.Helper()
	ln := pipenet.Listen()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: ln.Dial}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	return func(ctx context.Context, x int) (int, error) {
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
		time.Sleep(work)
		return x, flow.CheckResponse(resp)
	}
}

package delivery_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/pipenet"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func TestHTTPBackendsRoundTrip(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	srv := httptest.NewServer(delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{PayingPrefix: "vip-"}, l,
		func(o string) bool { return o == "bad" })))
	defer srv.Close()
	b := delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(8))
	r := valid()
	if acct, err := b.Accounts.Check(ctx, r.Owner); err != nil || acct.Tier != delivery.Free {
		t.Fatalf("free account over HTTP: %+v, %v", acct, err)
	}
	if acct, err := b.Accounts.Check(ctx, "vip-1"); err != nil || acct.Tier != delivery.Paying {
		t.Fatalf("paying account over HTTP: %+v, %v", acct, err)
	}
	_, err := b.Accounts.Check(ctx, "bad")
	var he *flow.HTTPError
	if !errors.As(err, &he) || he.Status != 403 || stream.Classify(err).Transient {
		t.Fatalf("suspended over HTTP: %v", err)
	}
	for range 2 { // PUT twice: created once
		if err := b.Packages.Put(ctx, r.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	need, err := b.ThirdParty.Needed(ctx, r)
	if err != nil || need {
		t.Fatalf("third party: %v %v", need, err)
	}
	id, err := b.Drones.Schedule(ctx, r.ID, r.Pickup)
	if err != nil || id == "" {
		t.Fatalf("drone: %q %v", id, err)
	}
	if _, err := b.Drones.Schedule(ctx, "d-far", delivery.Location{Lat: 78.2, Lon: 15}); stream.Classify(err).Transient || !errors.As(err, &he) || he.Status != 422 {
		t.Fatalf("no drone base over HTTP: %v", err)
	}
	if err := b.Deliveries.Put(ctx, r.ID, delivery.Progress{Request: r}); err != nil {
		t.Fatal(err)
	}
	if l.Created("packages", r.ID) != 1 || !l.Live("drones", r.ID) || !l.Live("deliveries", r.ID) {
		t.Fatal("side effects missing or doubled")
	}
	for _, del := range []func(context.Context, string) error{b.Deliveries.Delete, b.Drones.Cancel, b.Packages.Delete, b.Packages.Delete} {
		if err := del(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if l.Live("packages", r.ID) || l.Live("drones", r.ID) || l.Live("deliveries", r.ID) {
		t.Fatal("undo over HTTP left records")
	}
}

func TestHTTPFaultsKeepTheirClass(t *testing.T) {
	srv := httptest.NewServer(delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{TransientRate: 1}, delivery.NewLedger(), nil)))
	defer srv.Close()
	b := delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(2))
	err := b.Packages.Put(context.Background(), "d-1", valid())
	if c := stream.Classify(err); !c.Transient {
		t.Fatalf("503 over HTTP classified %+v (%v)", c, err)
	}
}

// slowServices serves the simulated services behind HTTP, each call taking
// 5 ms, over in-memory connections (inside a synctest bubble).
func slowServices(t *testing.T) (*httptest.Server, *pipenet.Listener) {
	t.Helper()
	h := delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), func(o string) bool { return o == "bad" }))
	ln := pipenet.Listen()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		h.ServeHTTP(w, r)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ln
}

// Calls one after the other share one connection, whatever the answer: the
// client reads each to the end, without which the transport closes the
// connection and the next call dials a new one.
func TestHTTPClientReusesItsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ln := slowServices(t)
		client := delivery.NewHTTPClient(4)
		client.Transport.(*http.Transport).DialContext = ln.Dial
		defer client.CloseIdleConnections()
		b := delivery.HTTPBackends(srv.URL, client)
		ctx, r := context.Background(), valid()
		for range 5 {
			if _, err := b.Accounts.Check(ctx, r.Owner); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Accounts.Check(ctx, "bad"); err == nil {
				t.Fatal("a suspended owner passed the check")
			}
			if err := b.Packages.Put(ctx, r.ID, r); err != nil {
				t.Fatal(err)
			}
			if _, err := b.ThirdParty.Needed(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if d := ln.Dials(); d != 1 {
			t.Fatalf("20 calls one after the other made %d connections, want 1", d)
		}
	})
}

// checkAccounts makes n account checks at once through b in a stage with a
// 50 ms attempt timeout timed from the send, and returns what OnCall saw.
func checkAccounts(t *testing.T, b delivery.Backends, n int) []flow.CallInfo {
	t.Helper()
	var mu sync.Mutex
	var calls []flow.CallInfo
	a := flow.MapAsync(n, func(ctx context.Context, x int) (int, error) {
		_, err := b.Accounts.Check(ctx, "owner")
		return x, err
	}, flow.CallTimeout(50*time.Millisecond), flow.TimeoutFromSend(), flow.OnCall(func(c flow.CallInfo) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}))
	xs := make([]int, n)
	g := stream.New()
	stream.To(stream.Via(stream.From(g, source.Slice(xs)), a), sink.Discard[int]())
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return calls
}

// The client opens no more connections than the calls it may have in
// flight, and keeps them all for the next calls.
func TestHTTPClientPoolIsSizedToTheCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ln := slowServices(t)
		client := delivery.NewHTTPClient(4)
		client.Transport.(*http.Transport).DialContext = ln.Dial
		defer client.CloseIdleConnections()
		b := delivery.HTTPBackends(srv.URL, client)
		for round := range 3 {
			for _, c := range checkAccounts(t, b, 40) {
				if c.Err != nil {
					t.Fatalf("round %d: %v", round, c.Err)
				}
			}
			if d := ln.Dials(); d != 4 {
				t.Fatalf("after round %d, %d connections made, want 4", round, d)
			}
		}
	})
}

// The answers of the services are read whatever their size: a short one
// from a pooled buffer, one past 64 KiB as it streams in; an answer that
// is not one JSON value is an unreadable answer, named as such.
func TestHTTPAnswersOfAnySize(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	answers := map[string]string{
		"short": `{"drone_id":"d-1"}` + "\n",
		"long":  `{"drone_id":"d-2","note":"` + long + `"}`,
		"two":   `{"drone_id":"d-3"} {"drone_id":"d-4"}`,
		"cut":   `{"drone_id":"d-`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, answers[strings.TrimPrefix(r.URL.Path, "/drones/")])
	}))
	defer srv.Close()
	b := delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(4))
	ctx := context.Background()
	for id, want := range map[string]string{"short": "d-1", "long": "d-2"} {
		if got, err := b.Drones.Schedule(ctx, id, delivery.Location{}); err != nil || got != want {
			t.Errorf("%s answer: %q %v, want %q", id, got, err, want)
		}
	}
	for _, id := range []string{"two", "cut"} {
		_, err := b.Drones.Schedule(ctx, id, delivery.Location{})
		if err == nil || !strings.Contains(err.Error(), "decoding the answer") {
			t.Errorf("%s answer: %v, want an error decoding the answer", id, err)
		}
	}
}

// A call to the services costs no goroutine of its own beyond the
// transport's connection: net/http watches a request with two more
// goroutines and a timer (setRequestCancel, awaitLegacyCancel) when its
// client has a Timeout and a transport net/http does not know, which the
// tracing wrapper is. The client's timeout still bounds the call.
func TestHTTPCallStartsNoWatcherGoroutines(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/packages/slow" {
			time.Sleep(300 * time.Millisecond)
			return
		}
		inside <- struct{}{}
		<-release
	}))
	defer srv.Close()
	cl := delivery.NewHTTPClient(4)
	b := delivery.HTTPBackends(srv.URL, cl)
	// The call made as the scheduler makes it: in a MapAsync stage, whose
	// call context ends without a goroutine, through a value added to it.
	var dump strings.Builder
	g := stream.New()
	calls := stream.Via(stream.From(g, source.Slice([]string{"o-1"})), flow.MapAsync(1, func(ctx context.Context, owner string) (string, error) {
		go func() {
			<-inside
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
			close(release)
		}()
		acct, err := b.Accounts.Check(delivery.ForDelivery(ctx, "d-1"), owner)
		return string(acct.Tier), err
	}, flow.Retry(delivery.DefaultRetry()), flow.TimeoutFromSend()))
	stream.To(calls, sink.Discard[string]())
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, watcher := range []string{"net/http.setRequestCancel", "net/http.awaitLegacyCancel", "context.(*cancelCtx).propagateCancel"} {
		if strings.Contains(dump.String(), watcher) {
			t.Errorf("a call in flight has a goroutine in %s", watcher)
		}
	}
	// The client's Timeout (here 100 ms) still ends a call that outlasts it.
	cl.Timeout = 100 * time.Millisecond
	b = delivery.HTTPBackends(srv.URL, cl)
	if err := b.Packages.Put(context.Background(), "slow", delivery.Request{ID: "slow"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call past the client's timeout: %v, want a deadline exceeded", err)
	}
}

// A traced call writes its traceparent into a request of its own: the
// next call, untraced, carries none, and every call says it sends JSON.
func TestHTTPTracedCallLeavesTheNextUntouched(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Content-Type")+" traceparent="+r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer srv.Close()
	b := delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(4))
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
	for _, ctx := range []context.Context{traced, context.Background()} {
		if err := b.Packages.Put(ctx, "p-1", delivery.Request{ID: "p-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "application/json traceparent=00-01") || got[1] != "application/json traceparent=" {
		t.Fatalf("requests seen: %q, want the first traced, the second not, both JSON", got)
	}
}

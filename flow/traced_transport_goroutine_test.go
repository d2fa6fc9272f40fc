package flow_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// A traced stage keeps its call context's AfterFunc visible (afterFuncCtx)
// so that the context the HTTP transport derives for each request needs
// no goroutine to watch it. TracedTransport then hands the transport a
// context.WithValue of that context (the client span's), which hides
// AfterFunc again: each traced request costs one more goroutine, alive
// for the whole request, that an untraced one does not.
func TestTracedTransportAddsNoGoroutinePerRequest(t *testing.T) {
	inHandler := make(chan int)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler <- runtime.NumGoroutine()
		<-release
	}))
	defer srv.Close()
	// One connection, kept: the second request reuses it, so that both
	// count the same connection goroutines.
	base := &http.Transport{MaxConnsPerHost: 1}
	defer base.CloseIdleConnections()
	counts := map[string]int{}
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"plain", &http.Client{Transport: base}}, {"traced", &http.Client{Transport: flow.TracedTransport(base)}}, {"plain again", &http.Client{Transport: base}}} {
		tp, _ := tracedProvider(t)
		g := stream.New(stream.WithTracerProvider(tp))
		stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(1, func(ctx context.Context, v string) (string, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				return "", err
			}
			resp, err := c.client.Do(req)
			if err != nil {
				return "", err
			}
			return v, resp.Body.Close()
		}, flow.CallTimeout(time.Minute))), sink.Discard[string]())
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		counts[c.name] = <-inHandler
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if counts["traced"] > counts["plain"] && counts["traced"] > counts["plain again"] {
		t.Errorf("goroutines during a request: %d traced, %d and %d untraced", counts["traced"], counts["plain"], counts["plain again"])
	}
}

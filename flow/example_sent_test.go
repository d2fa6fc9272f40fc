package flow_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// An HTTP call whose attempt timeout counts from the moment its request is
// written: the wait for one of the client's two connections is the
// worker's own queueing, not the service's latency, and fails nothing.
func ExampleTimeoutFromSend() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.ToUpper(r.URL.Query().Get("q")))
	}))
	defer srv.Close()
	tr := &http.Transport{MaxConnsPerHost: 2, MaxIdleConnsPerHost: 2}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	upper := flow.MapAsync(8, func(ctx context.Context, q string) (string, error) {
		req, err := http.NewRequestWithContext(flow.SentOnWrite(ctx), http.MethodGet, srv.URL+"/?q="+q, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if err := flow.CheckResponse(resp); err != nil {
			return "", err
		}
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}, flow.CallTimeout(time.Second), flow.TimeoutFromSend(), flow.InOrder())

	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"a", "b", "c", "d"})), upper)
	fmt.Println(collect(g, s).Values())
	// Output: [A B C D]
}

// A call timed from its send, with the whole call (the wait for the
// client's one connection included) bounded to 5 s, as an http.Client's
// Timeout would bound it, without a timer per call.
func ExampleSentOnWriteWithin() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.ToUpper(r.URL.Query().Get("q")))
	}))
	defer srv.Close()
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	upper := flow.MapAsync(4, func(ctx context.Context, q string) (string, error) {
		ctx, cancel := flow.SentOnWriteWithin(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/?q="+q, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}, flow.CallTimeout(time.Second), flow.TimeoutFromSend(), flow.InOrder())

	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"x", "y", "z"})), upper)
	fmt.Println(collect(g, s).Values())
	// Output: [X Y Z]
}

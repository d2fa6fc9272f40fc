package delivery_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// In a stage timed from the send, the client's Timeout still bounds a
// whole call: one that a hung service never answers, and one that waits
// for the connection the first holds (the pool has one), whose attempt
// has not started its clock. Both end with the bound's deadline exceeded.
func TestHTTPClientTimeoutBoundsCallsTimedFromTheSend(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hung)
	cl := delivery.NewHTTPClient(1)
	cl.Timeout = 200 * time.Millisecond
	defer cl.CloseIdleConnections()
	b := delivery.HTTPBackends(srv.URL, cl)
	var mu sync.Mutex
	var errs []error
	g := stream.New()
	calls := stream.Via(stream.From(g, source.Slice([]string{"d-1", "d-2"})), flow.MapAsync(2, func(ctx context.Context, id string) (string, error) {
		err := b.Packages.Put(ctx, id, delivery.Request{ID: id})
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		return id, nil
	}, flow.TimeoutFromSend(), flow.CallTimeout(time.Minute)))
	stream.To(calls, sink.Discard[string]())
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("calls bounded to 200 ms still running after 30 s")
	}
	if len(errs) != 2 {
		t.Fatalf("%d calls ended, want 2", len(errs))
	}
	for _, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call past the client's timeout: %v, want a deadline exceeded", err)
		}
	}
}

package supervisor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// The worker sizes its HTTP client's connections to MaxCalls; each
// compensation in flight makes three calls at once (Undo), so 2*64
// compensations make 384 calls. With a service that answers in 800 ms
// (slow, as when compensations pile up), calls beyond the pool wait for a
// connection and the client's 2 s Timeout, which counts that wait, fails
// them. Before MaxCalls counted the three undos: 64 of 128 compensations
// failed.
func TestMaxCallsCoversEveryUndoInFlight(t *testing.T) {
	var cur, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(800 * time.Millisecond)
		cur.Add(-1)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	b := delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(MaxCalls))
	var wg sync.WaitGroup
	var failed atomic.Int64
	var one atomic.Value
	for i := range 2 * undoCalls { // undoCalls compensations in each of the two chains
		wg.Go(func() {
			p := delivery.Progress{Request: delivery.Request{ID: "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))}}
			if err := Undo(context.Background(), b, p); err != nil {
				failed.Add(1)
				one.Store(err)
			}
		})
	}
	wg.Wait()
	t.Logf("peak concurrent requests at the service: %d (MaxCalls %d, calls made %d)", peak.Load(), MaxCalls, undosPerCompensation*2*undoCalls)
	if failed.Load() > 0 {
		t.Fatalf("%d of %d compensations failed against a service answering every call in 800 ms; one: %v", failed.Load(), 2*undoCalls, one.Load())
	}
}

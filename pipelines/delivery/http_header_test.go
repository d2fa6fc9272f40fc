package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// addHop is a RoundTripper that adds a header to the request it is given,
// as many wrappers installed as http.DefaultTransport do (credentials, a
// user agent, a request id).
type addHop struct{ base http.RoundTripper }

func (a addHop) RoundTrip(r *http.Request) (*http.Response, error) {
	r.Header.Add("X-Hop", "1")
	return a.base.RoundTrip(r)
}

// A client without a transport of its own sends through
// http.DefaultTransport, which a program may have replaced with one that
// writes to the request's headers: each call then has a header of its
// own, or one call's addition would reach every later call, and calls at
// once would write one map at once.
func TestHTTPReplacedDefaultTransportGetsAHeaderPerCall(t *testing.T) {
	var mu sync.Mutex
	var hops []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hops = append(hops, len(r.Header.Values("X-Hop")))
		mu.Unlock()
	}))
	defer srv.Close()
	orig := http.DefaultTransport
	http.DefaultTransport = addHop{orig}
	defer func() { http.DefaultTransport = orig }()
	b := delivery.HTTPBackends(srv.URL, &http.Client{})
	for range 3 {
		if err := b.Packages.Put(context.Background(), "p-1", delivery.Request{ID: "p-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(hops, []int{1, 1, 1}) {
		t.Fatalf("X-Hop headers the service saw on each call: %v, want one each", hops)
	}
}

package flow_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// A call's URL may carry a password and a query with a token: the texts a
// failed call leaves in spans (exception.message), in the failure (its
// reason, which the dead letter writes) and in the retry log lines must
// not, whether the service answered non-2xx or the call got no answer.
func TestFailedCallTextsHideUserInfoAndQuery(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://bob:hunter2@", 1) + "/r4?secret=x"
	}
	client := &http.Client{Transport: flow.TracedTransport(nil), Timeout: 5 * time.Second}
	call := func(ctx context.Context, base string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, withSecrets(base), nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		return base, flow.CheckResponse(resp)
	}
	var logs bytes.Buffer
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp), stream.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	var mu sync.Mutex
	var reasons []string
	src := stream.SourceFunc[string](func(ctx context.Context, out *stream.Outlet[string]) error {
		for _, u := range []string{srv.URL, gone.URL} {
			m := stream.Message[string]{Value: u}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	stream.To(stream.Via(stream.From(g, src), flow.MapAsync(2, call,
		flow.Retry(flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.NoJitter, MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))),
		sink.Collect[string]())
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, m.Value.Err.Error())
		return nil
	}))
	run(t, g)
	var texts []string
	for _, s := range exp.GetSpans() {
		for _, e := range s.Events {
			for _, kv := range e.Attributes {
				if kv.Key == "exception.message" {
					texts = append(texts, e.Name+": "+kv.Value.Emit())
				}
			}
		}
	}
	if len(reasons) != 2 || len(texts) == 0 || !strings.Contains(logs.String(), "retry") {
		t.Fatalf("failures %q, span texts %q, logs %s", reasons, texts, logs.String())
	}
	texts = append(texts, reasons...)
	texts = append(texts, logs.String())
	for _, s := range texts {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "bob") || strings.Contains(s, "secret") {
			t.Errorf("a text shows the URL's user info or query: %s", s)
		}
	}
	if !strings.Contains(reasons[0]+reasons[1], srv.URL+"/r4") {
		t.Errorf("the failures do not name the call's URL without its secrets: %q", reasons)
	}
}

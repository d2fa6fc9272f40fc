package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentTP = "00-" + traceID + "-00f067aa0ba902b7-01"
)

// headed emits one message per traceparent given ("" for none).
func headed(tps ...string) stream.Source[string] {
	return stream.SourceFunc[string](func(ctx context.Context, out *stream.Outlet[string]) error {
		for _, tp := range tps {
			m := stream.Message[string]{Value: tp}
			if tp != "" {
				m.Headers = []stream.Header{{Key: tracing.TraceParent, Value: []byte(tp)}}
			}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

func tracedProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrsOf(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// A traced MapAsync makes a span per message, child of its traceparent;
// the HTTP calls its function makes through TracedTransport are children
// of it, one per attempt, and the service receives their traceparent.
func TestMapAsyncTracesCallsAndRetries(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	var received []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get("traceparent"))
		mu.Unlock()
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	client := &http.Client{Transport: flow.TracedTransport(nil), Timeout: 5 * time.Second}
	call := func(ctx context.Context, v string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/deliveries?token=secret", nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		return v, flow.CheckResponse(resp)
	}
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp), stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := sink.Collect[string]()
	stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(2, call,
		flow.Retry(flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.NoJitter, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}))), out)
	run(t, g)
	if len(out.Values()) != 1 {
		t.Fatalf("results %v", out.Values())
	}
	spans := exp.GetSpans()
	var stage tracetest.SpanStub
	var https []tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case "map-async":
			stage = s
		case http.MethodPost:
			https = append(https, s)
		}
	}
	if stage.SpanContext.TraceID().String() != traceID || stage.Parent.SpanID().String() != "00f067aa0ba902b7" || len(https) != 2 {
		t.Fatalf("stage span %v (parent %v), %d HTTP spans of %d", stage.SpanContext.TraceID(), stage.Parent.SpanID(), len(https), len(spans))
	}
	events := map[string]int{}
	for _, e := range stage.Events {
		events[e.Name]++
	}
	if events["attempt"] != 2 || events["attempt failed"] != 1 || events["retry"] != 1 || stage.Status.Code.String() == "Error" ||
		attrsOf(stage)["sluice.attempts"] != "2" {
		t.Errorf("stage span events %v status %v attributes %v", events, stage.Status, attrsOf(stage))
	}
	for i, h := range https {
		a := attrsOf(h)
		if h.Parent.SpanID() != stage.SpanContext.SpanID() || h.SpanKind != trace.SpanKindClient || a["http.request.method"] != "POST" ||
			a["url.full"] != srv.URL+"/deliveries" {
			t.Errorf("HTTP span %d: parent %v kind %v attributes %v", i, h.Parent.SpanID(), h.SpanKind, a)
		}
		want := "00-" + traceID + "-" + h.SpanContext.SpanID().String() + "-01"
		if !containsStr(received, want) {
			t.Errorf("the service received %v, not the span's traceparent %s", received, want)
		}
	}
	first, second := attrsOf(https[0]), attrsOf(https[1])
	if first["http.response.status_code"] != "503" || first["http.response.header.retry-after"] != `["0"]` || https[0].Status.Code.String() != "Error" ||
		second["http.response.status_code"] != "200" || second["http.request.resend_count"] != "1" || first["http.request.resend_count"] != "" {
		t.Errorf("attempt spans: %v then %v", first, second)
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A message with a malformed traceparent is processed in a new trace; one
// whose call fails ends its span with an error status.
func TestMapAsyncTraceMalformedAndFailed(t *testing.T) {
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp))
	out := sink.Collect[string]()
	var failures atomic.Int32
	stream.To(stream.Via(stream.From(g, headed("00-1-01", "fail")), flow.MapAsync(2, func(ctx context.Context, v string) (string, error) {
		if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
			return "", errors.New("the function's context carries no span")
		}
		if v == "fail" {
			return "", errors.New("refused")
		}
		return v, nil
	})), out)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { failures.Add(1); return nil }))
	run(t, g)
	if len(out.Values()) != 1 || failures.Load() != 1 {
		t.Fatalf("results %v, failures %d", out.Values(), failures.Load())
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		if s.Parent.IsValid() || s.SpanContext.TraceID().String() == traceID {
			t.Errorf("span %v has parent %v", s.SpanContext.TraceID(), s.Parent)
		}
		failed, attemptFailed := s.Status.Code.String() == "Error", false
		for _, e := range s.Events {
			attemptFailed = attemptFailed || e.Name == "attempt failed"
		}
		if failed != attemptFailed {
			t.Errorf("status %v with events %v", s.Status, s.Events)
		}
	}
}

// Off, the function's context carries no span and the message's headers
// are left as they came.
func TestMapAsyncUntraced(t *testing.T) {
	g := stream.New()
	out := sink.Collect[string]()
	stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(1, func(ctx context.Context, v string) (string, error) {
		if trace.SpanFromContext(ctx).SpanContext().IsValid() {
			return "", errors.New("a span without tracing")
		}
		return v, nil
	})), out)
	run(t, g)
	ms := out.Messages()
	if len(ms) != 1 || string(ms[0].Header(tracing.TraceParent)) != parentTP {
		t.Fatalf("messages %+v", ms)
	}
}

// When the stage stops with calls in flight, their spans end too.
func TestMapAsyncTraceEndsSpansOnStop(t *testing.T) {
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp), stream.WithDrainTimeout(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 4)
	stream.To(stream.Via(stream.From(g, headed(parentTP, parentTP, parentTP)), flow.MapAsync(4, func(ctx context.Context, v string) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	})), sink.Collect[string]())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	for range 3 {
		<-started
	}
	cancel()
	<-done
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans ended, want 3", len(spans))
	}
	for _, s := range spans {
		if len(s.Events) == 0 || !strings.HasPrefix(s.Events[len(s.Events)-1].Name, "stage stopped") {
			t.Errorf("events %v", s.Events)
		}
	}
}

// A message whose traceparent says its trace is not sampled gets no span:
// the stages follow the sampling decision made at the source.
func TestMapAsyncFollowsAnUnsampledTrace(t *testing.T) {
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp))
	out := sink.Collect[string]()
	unsampled := "00-" + traceID + "-00f067aa0ba902b7-00"
	stream.To(stream.Via(stream.From(g, headed(unsampled, parentTP)), flow.MapAsync(1, func(ctx context.Context, v string) (string, error) {
		if traced := trace.SpanFromContext(ctx).SpanContext().IsValid(); traced != (v == parentTP) {
			return "", errors.New("a span for an unsampled message, or none for a sampled one")
		}
		return v, nil
	})), out)
	run(t, g)
	if len(out.Values()) != 2 || len(exp.GetSpans()) != 1 {
		t.Fatalf("results %v, %d spans", out.Values(), len(exp.GetSpans()))
	}
}

// The context a traced stage gives its function still is the stage's
// attempt clock: Sent starts the attempt's timeout, and the failure names
// the timeout the attempt had.
func TestMapAsyncTracedKeepsTheAttemptClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, exp := tracedProvider(t)
		g := stream.New(stream.WithTracerProvider(tp), stream.WithLogger(slog.New(slog.DiscardHandler)))
		var errs []error
		stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(1, func(ctx context.Context, v string) (string, error) {
			time.Sleep(time.Second) // before the send: not counted
			if ctx.Err() != nil {
				return "", errors.New("timed out before the send")
			}
			flow.Sent(ctx)
			<-ctx.Done()
			return "", ctx.Err()
		}, flow.CallTimeout(300*time.Millisecond), flow.TimeoutFromSend())), sink.Discard[string]())
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			errs = append(errs, m.Value.Err)
			return nil
		}))
		run(t, g)
		if len(errs) != 1 || !errors.Is(errs[0], flow.ErrCallTimeout) || !strings.Contains(errs[0].Error(), "after 300ms") {
			t.Fatalf("failures %v", errs)
		}
		if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Status.Code.String() != "Error" {
			t.Fatalf("spans %+v", spans)
		}
	})
}

// The stage's span is named after the stage in the pipeline.
func TestMapAsyncSpanNamedAfterTheStage(t *testing.T) {
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp))
	stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(1, func(_ context.Context, v string) (string, error) { return v, nil }),
		stream.Name("check-account")), sink.Discard[string]())
	run(t, g)
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Name != "check-account" || attrsOf(spans[0])["sluice.stage"] != "check-account" {
		t.Fatalf("spans %+v", spans)
	}
}

// A pipeline run under a span (a job's) does not make its messages that
// span's children: a message without a traceparent starts its own trace.
func TestMapAsyncIgnoresTheRunsSpan(t *testing.T) {
	tp, exp := tracedProvider(t)
	ctx, job := tp.Tracer("test").Start(context.Background(), "job")
	g := stream.New(stream.WithTracerProvider(tp))
	stream.To(stream.Via(stream.From(g, headed("")), flow.MapAsync(1, func(_ context.Context, v string) (string, error) { return v, nil })),
		sink.Discard[string]())
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	job.End()
	for _, s := range exp.GetSpans() {
		if s.Name == "map-async" && (s.Parent.IsValid() || s.SpanContext.TraceID() == job.SpanContext().TraceID()) {
			t.Fatalf("the stage span is the job's child: %+v", s.Parent)
		}
	}
	if len(exp.GetSpans()) != 2 {
		t.Fatalf("%d spans", len(exp.GetSpans()))
	}
}

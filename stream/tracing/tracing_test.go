package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestExtractInjectRoundTrip(t *testing.T) {
	e := stream.Envelope{Headers: []stream.Header{
		{Key: "tenant", Value: []byte("a")},
		{Key: tracing.TraceParent, Value: []byte(parent)},
		{Key: tracing.TraceState, Value: []byte("vendor=x")},
		{Key: tracing.Baggage, Value: []byte("user=42")},
	}}
	ctx := tracing.Extract(context.Background(), &e)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsSampled() {
		t.Fatalf("span context %+v", sc)
	}
	if sc.TraceState().Get("vendor") != "x" || baggage.FromContext(ctx).Member("user").Value() != "42" {
		t.Fatalf("tracestate %q, baggage %q", sc.TraceState().String(), baggage.FromContext(ctx).String())
	}
	var out stream.Envelope
	tracing.Inject(ctx, &out)
	if got := string(out.Header(tracing.TraceParent)); got != parent {
		t.Fatalf("traceparent %q, want %q", got, parent)
	}
	if string(out.Header(tracing.TraceState)) != "vendor=x" || string(out.Header(tracing.Baggage)) != "user=42" {
		t.Fatalf("headers %+v", out.Headers)
	}
}

func TestInjectReplacesWithoutTouchingSharedHeaders(t *testing.T) {
	shared := []stream.Header{{Key: "tenant", Value: []byte("a")}}
	e := stream.Envelope{Headers: shared[:1:1]}
	ctx := tracing.Extract(context.Background(), &stream.Envelope{Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte(parent)}}})
	tracing.Inject(ctx, &e)
	tracing.Inject(ctx, &e) // again: replaced, not appended twice
	if len(e.Headers) != 2 || string(e.Header(tracing.TraceParent)) != parent || len(shared) != 1 {
		t.Fatalf("headers %+v", e.Headers)
	}
}

func TestMalformedTraceparentIsNoParent(t *testing.T) {
	for _, v := range []string{"00-1-01", "", "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", strings.Repeat("x", 300)} {
		e := stream.Envelope{Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte(v)}}}
		if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), &e)); sc.IsValid() {
			t.Errorf("%q gave a parent %v", v, sc.TraceID())
		}
	}
}

func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func TestReceiveContinuesTheRecordsTrace(t *testing.T) {
	tp, exp := newProvider(t)
	r := tracing.NewReceiver(tp, "kafka")
	ts := time.Now().Add(-time.Second)
	e := stream.Envelope{Topic: "orders", Partition: 3, Offset: 17, Timestamp: ts,
		Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte(parent)}}}
	r.Receive(context.Background(), &e)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	if s.Name != "receive orders" || s.SpanKind != trace.SpanKindConsumer || s.Parent.SpanID().String() != "00f067aa0ba902b7" ||
		s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !s.StartTime.Equal(ts) || s.EndTime.Before(ts.Add(time.Second)) {
		t.Fatalf("span %s kind %v parent %v trace %v from %v to %v", s.Name, s.SpanKind, s.Parent.SpanID(), s.SpanContext.TraceID(), s.StartTime, s.EndTime)
	}
	want := map[string]string{"messaging.system": "kafka", "messaging.destination.name": "orders",
		"messaging.destination.partition.id": "3", "messaging.kafka.offset": "17", "messaging.operation.type": "receive"}
	for _, kv := range s.Attributes {
		if w, ok := want[string(kv.Key)]; ok {
			if kv.Value.Emit() != w {
				t.Errorf("%s = %s, want %s", kv.Key, kv.Value.Emit(), w)
			}
			delete(want, string(kv.Key))
		}
	}
	if len(want) > 0 {
		t.Errorf("missing attributes %v", want)
	}
	wantTP := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01"
	if got := string(e.Header(tracing.TraceParent)); got != wantTP || len(e.Headers) != 1 {
		t.Fatalf("traceparent %q, want %q (headers %+v)", got, wantTP, e.Headers)
	}
}

func TestReceiveStartsANewTraceOnAMalformedParent(t *testing.T) {
	tp, exp := newProvider(t)
	r := tracing.NewReceiver(tp, "redis")
	e := stream.Envelope{Topic: "requests", Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte("00-1-01")}}}
	r.Receive(context.Background(), &e)
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() {
		t.Fatalf("spans %+v", spans)
	}
	sc := spans[0].SpanContext
	if got := string(e.Header(tracing.TraceParent)); got != "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" {
		t.Fatalf("traceparent %q", got)
	}
	for _, kv := range spans[0].Attributes {
		if kv.Key == "messaging.kafka.offset" {
			t.Fatalf("a Redis span with a Kafka offset")
		}
	}
}

func TestReceiveUnsampledStillPropagates(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	e := stream.Envelope{Topic: "t"}
	tracing.NewReceiver(tp, "kafka").Receive(context.Background(), &e)
	tp0 := string(e.Header(tracing.TraceParent))
	if len(exp.GetSpans()) != 0 || !strings.HasPrefix(tp0, "00-") || !strings.HasSuffix(tp0, "-00") {
		t.Fatalf("spans %d, traceparent %q", len(exp.GetSpans()), tp0)
	}
}

func TestNewReceiverOff(t *testing.T) {
	if tracing.NewReceiver(nil, "kafka") != nil {
		t.Fatal("a receiver without a provider")
	}
}

func TestNotSampled(t *testing.T) {
	for v, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02": true,
		parent: false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03":  false,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":  false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-": false,
		"00-1-00": false,
		"":        false,
	} {
		e := stream.Envelope{Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte(v)}}}
		if got := tracing.NotSampled(&e); got != want {
			t.Errorf("NotSampled(%q) = %v, want %v", v, got, want)
		}
	}
	if tracing.NotSampled(&stream.Envelope{}) {
		t.Error("a message without headers is NotSampled")
	}
}

// The headers a Receiver writes for one message are not shared with the
// next message's: appending to one leaves the other as it was.
func TestReceiveHeadersAreTheMessagesOwn(t *testing.T) {
	tp, _ := newProvider(t)
	r := tracing.NewReceiver(tp, "kafka")
	a, b := stream.Envelope{Topic: "t"}, stream.Envelope{Topic: "t", Headers: []stream.Header{{Key: "k", Value: []byte("v")}}}
	r.Receive(context.Background(), &a)
	r.Receive(context.Background(), &b)
	a.Headers = append(a.Headers, stream.Header{Key: "extra", Value: []byte("x")})
	tpB := string(b.Header(tracing.TraceParent))
	if len(b.Headers) != 2 || b.Headers[0].Key != "k" || b.Headers[1].Key != tracing.TraceParent || len(tpB) != 55 ||
		tpB == string(a.Header(tracing.TraceParent)) {
		t.Fatalf("headers of b %+v after an append to a's", b.Headers)
	}
}

// A span in the context a source runs under is no parent of its
// messages: a message without a traceparent starts a trace of its own.
func TestReceiveIgnoresTheCallersSpan(t *testing.T) {
	tp, exp := newProvider(t)
	ctx, job := tp.Tracer("test").Start(context.Background(), "job")
	defer job.End()
	e := stream.Envelope{Topic: "t"}
	tracing.NewReceiver(tp, "kafka").Receive(ctx, &e)
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() || spans[0].SpanContext.TraceID() == job.SpanContext().TraceID() {
		t.Fatalf("spans %+v", spans)
	}
}

package tracing_test

import (
	"context"
	"testing"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// A source of its own that gives each message the same headers (a static
// set copied by value: Message copies share the header array) hands each
// message to Receive. Receiving the second message must not rewrite the
// first one's traceparent: the first, still in flight, would then name the
// second's receive span, and its dead letter or output record would join
// the wrong trace.
func TestReceiveDoesNotRewriteAnotherMessagesTraceparent(t *testing.T) {
	tp, exp := newProvider(t)
	r := tracing.NewReceiver(tp, "kafka")
	static := []stream.Header{{Key: "tenant", Value: []byte("a")}, {Key: tracing.TraceParent, Value: []byte(parent)}}
	a := stream.Envelope{Topic: "t", Offset: 1, Headers: static}
	b := stream.Envelope{Topic: "t", Offset: 2, Headers: static}
	r.Receive(context.Background(), &a)
	tpA := string(a.Header(tracing.TraceParent))
	r.Receive(context.Background(), &b)
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	if got := string(a.Header(tracing.TraceParent)); got != tpA {
		t.Errorf("receiving b rewrote a's traceparent: %q, was %q (a's span %s, b's span %s)",
			got, tpA, spans[0].SpanContext.SpanID(), spans[1].SpanContext.SpanID())
	}
	if got := string(static[1].Value); got != parent {
		t.Errorf("the shared header array the messages came with was rewritten: traceparent %q, was %q", got, parent)
	}
}

// Inject on one copy of a message (a Broadcast's branches share the
// header array) must not change the other copy's traceparent: the
// replace path writes into the shared array, though Carrier.Set says it
// takes care of headers shared "with copies of the message".
func TestInjectDoesNotRewriteACopysTraceparent(t *testing.T) {
	m := stream.Message[string]{Value: "v"}
	m.Headers = []stream.Header{{Key: tracing.TraceParent, Value: []byte(parent)}}
	branchA, branchB := m, m // the copies a Broadcast hands its outputs
	tp, _ := newProvider(t)
	ctx, span := tp.Tracer("test").Start(tracing.Extract(context.Background(), &branchA.Envelope), "stage of branch A")
	span.End()
	tracing.Inject(ctx, &branchA.Envelope)
	if got := string(branchA.Header(tracing.TraceParent)); got == parent {
		t.Fatalf("branch A's traceparent not replaced: %q", got)
	}
	if got := string(branchB.Header(tracing.TraceParent)); got != parent {
		t.Errorf("Inject on branch A rewrote branch B's traceparent: %q, was %q", got, parent)
	}
}

// A record that came with two traceparent headers (a producer that
// appended one instead of replacing it) leaves the source with the first
// rewritten and the second as it came: a sink writes both, and a reader
// that takes the last header of a key (the Java client's lastHeader, as
// its tracing instrumentation does) continues the producer's span, not
// the receive span, skipping this pipeline's part of the trace.
func TestReceiveLeavesNoStaleDuplicateTraceparent(t *testing.T) {
	tp, exp := newProvider(t)
	const other = "00-11111111111111111111111111111111-2222222222222222-01"
	e := stream.Envelope{Topic: "t", Headers: []stream.Header{
		{Key: tracing.TraceParent, Value: []byte(parent)},
		{Key: tracing.TraceParent, Value: []byte(other)},
	}}
	tracing.NewReceiver(tp, "kafka").Receive(context.Background(), &e)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sc := spans[0].SpanContext
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	for i, h := range e.Headers {
		if h.Key == tracing.TraceParent && string(h.Value) != want {
			t.Errorf("header %d: traceparent %q after Receive; the receive span is %q", i, h.Value, want)
		}
	}
}

package tracing_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// A stage of your own continues a message's trace from its headers, and
// writes a span context into the headers of a message it makes.
func Example() {
	in := stream.Message[string]{Value: "order-1"}
	in.Headers = []stream.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}

	ctx := tracing.Extract(context.Background(), &in.Envelope)
	sc := trace.SpanContextFromContext(ctx)
	fmt.Println("trace:", sc.TraceID(), "sampled:", sc.IsSampled())

	var out stream.Message[string]
	tracing.Inject(ctx, &out.Envelope)
	fmt.Println("out:", string(out.Header(tracing.TraceParent)))

	bad := stream.Message[string]{}
	bad.Headers = []stream.Header{{Key: "traceparent", Value: []byte("not a trace")}}
	fmt.Println("malformed gives a parent:", trace.SpanContextFromContext(tracing.Extract(context.Background(), &bad.Envelope)).IsValid())
	// Output:
	// trace: 4bf92f3577b34da6a3ce929d0e0e4736 sampled: true
	// out: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// malformed gives a parent: false
}

package flow_test

import (
	"context"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// A program that traces only when asked builds its provider conditionally:
//
//	var tp *sdktrace.TracerProvider
//	if endpoint != "" { tp = sdktrace.NewTracerProvider(...) }
//	g := stream.New(stream.WithTracerProvider(tp))
//
// WithTracerProvider says nil is "tracing off", but this nil pointer in
// the interface turns tracing on, and the first stage asking it for a
// Tracer dereferences it: the pipeline fails with a stage's panic
// (a source's too). Untraced, it must process its messages; or Run
// must refuse the option, naming it, before any stage starts.
func TestNilProviderPointerIsTracingOff(t *testing.T) {
	var tp *sdktrace.TracerProvider
	if os.Getenv("OTLP_ENDPOINT_NEVER_SET_IN_TESTS") != "" {
		tp = sdktrace.NewTracerProvider()
	}
	g := stream.New(stream.WithTracerProvider(tp))
	out := sink.Collect[string]()
	stream.To(stream.Via(stream.From(g, headed(parentTP)), flow.MapAsync(1, func(_ context.Context, v string) (string, error) { return v, nil })), out)
	err := g.Run(context.Background())
	if err != nil && strings.Contains(err.Error(), "TracerProvider") {
		return // refused, naming the option
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(out.Values()) != 1 {
		t.Fatalf("results %v", out.Values())
	}
}

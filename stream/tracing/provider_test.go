package tracing_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-streams/sluice/stream/tracing"
)

// A *sdktrace.TracerProvider left nil by a program that traces only when
// asked is tracing off, as nil is: no receiver, so no Tracer call on it.
func TestNilProviderPointerIsNotEnabled(t *testing.T) {
	var nilSDK *sdktrace.TracerProvider
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
		want bool
	}{{"nil", nil, false}, {"nil pointer", nilSDK, false}, {"sdk", sdktrace.NewTracerProvider(), true}, {"noop", noop.NewTracerProvider(), true}} {
		if got := tracing.Enabled(c.tp); got != c.want {
			t.Errorf("Enabled(%s) = %v, want %v", c.name, got, c.want)
		}
	}
	if r := tracing.NewReceiver(nilSDK, "kafka"); r != nil {
		t.Errorf("NewReceiver of a nil pointer gave a receiver")
	}
}

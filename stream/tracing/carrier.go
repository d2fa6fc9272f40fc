package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sluice-streams/sluice/stream"
)

// The W3C header names.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
	Baggage     = "baggage"
)

// ScopeName is the instrumentation scope of the spans sluice starts: the
// name it asks a TracerProvider's Tracer for.
const ScopeName = "github.com/sluice-streams/sluice"

// propagator reads and writes traceparent, tracestate and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the propagator sluice uses in message headers: W3C
// trace context and W3C baggage.
func Propagator() propagation.TextMapPropagator { return propagator }

// Carrier is a propagation.TextMapCarrier over a message's headers: Get
// returns the first header of a key, Set replaces it (or appends one).
// Keys are matched exactly: the W3C names are lower case.
type Carrier struct {
	Headers *[]stream.Header
}

var _ propagation.TextMapCarrier = Carrier{}

// Get returns the value of the first header named key, "" if none.
func (c Carrier) Get(key string) string {
	for _, h := range *c.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set replaces the value of the first header named key, or appends a
// header if there is none.
func (c Carrier) Set(key, value string) {
	hs := *c.Headers
	for i := range hs {
		if hs[i].Key == key {
			hs[i].Value = []byte(value)
			return
		}
	}
	// A new slice: the headers may share their array with the record
	// they were read from, or with copies of the message.
	n := make([]stream.Header, len(hs), len(hs)+1)
	copy(n, hs)
	*c.Headers = append(n, stream.Header{Key: key, Value: []byte(value)})
}

// Keys returns the header keys.
func (c Carrier) Keys() []string {
	ks := make([]string, len(*c.Headers))
	for i, h := range *c.Headers {
		ks[i] = h.Key
	}
	return ks
}

// Extract returns ctx with the span context and baggage that e's headers
// carry (traceparent, tracestate, baggage). Headers that are missing or
// malformed add nothing: a span started from the context is then the root
// of a new trace.
func Extract(ctx context.Context, e *stream.Envelope) context.Context {
	if len(e.Headers) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, Carrier{Headers: &e.Headers})
}

// Inject writes the span context and baggage of ctx into e's headers,
// replacing those it had: the message then continues ctx's trace
// wherever it goes (a Kafka or Redis sink writes its headers). A ctx
// without a valid span context writes no traceparent.
func Inject(ctx context.Context, e *stream.Envelope) {
	propagator.Inject(ctx, Carrier{Headers: &e.Headers})
}

// injectSpan writes only the trace context of ctx (traceparent and
// tracestate), leaving the message's baggage as it came.
func injectSpan(ctx context.Context, e *stream.Envelope) {
	propagation.TraceContext{}.Inject(ctx, Carrier{Headers: &e.Headers})
}

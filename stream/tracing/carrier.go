package tracing

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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

// NotSampled reports whether e's traceparent has the W3C layout of
// version 00 and flags that say its trace is not sampled. A stage that
// traces uses it to skip the spans of such a message for the cost of a
// header scan: the sampler decided at the source (the receive span) and
// the stages follow that decision, as a parent-based sampler would. A
// message with no traceparent, or one of another layout, is not
// NotSampled: its stage span is the root of a new trace, sampled by the
// provider's sampler.
func NotSampled(e *stream.Envelope) bool {
	v := e.Header(TraceParent)
	if len(v) != 55 || v[0] != '0' || v[1] != '0' || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	switch v[54] { // the low bit of the flags is sampled
	case '0', '2', '4', '6', '8', 'a', 'c', 'e':
		return true
	}
	return false
}

// injectSpan writes the trace context of sc into e's headers: traceparent,
// and tracestate if sc has one. It writes the header's bytes at once,
// without the propagator's string: a source does it for every message.
func injectSpan(sc trace.SpanContext, e *stream.Envelope) {
	if !sc.IsValid() {
		return
	}
	b := make([]byte, traceParentLen)
	formatTraceParent(b, sc)
	setHeader(e, TraceParent, b)
	if ts := sc.TraceState(); ts.Len() > 0 {
		setHeader(e, TraceState, []byte(ts.String()))
	}
}

// traceParentLen is the length of a version 00 traceparent.
const traceParentLen = 55

// formatTraceParent writes sc as a version 00 traceparent into b, of
// traceParentLen bytes.
func formatTraceParent(b []byte, sc trace.SpanContext) {
	const hexDigits = "0123456789abcdef"
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	f := byte(sc.TraceFlags())
	b[53], b[54] = hexDigits[f>>4], hexDigits[f&0xf]
}

// setHeader is Carrier.Set with a value of bytes.
func setHeader(e *stream.Envelope, key string, v []byte) {
	for i := range e.Headers {
		if e.Headers[i].Key == key {
			e.Headers[i].Value = v
			return
		}
	}
	n := make([]stream.Header, len(e.Headers), len(e.Headers)+1)
	copy(n, e.Headers)
	e.Headers = append(n, stream.Header{Key: key, Value: v})
}

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
// returns the first header of a key, Set gives the message a new header
// slice with the key set. Keys are matched exactly: the W3C names are
// lower case.
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

// Set replaces *c.Headers by a new slice in which key has the one value
// value: in place of the first header named key, any later one dropped,
// or appended if there is none. It never writes into the array the
// headers had: that array may be shared with the record they were read
// from, with other messages (a source that gives each the same headers),
// or with copies of the message (a Broadcast's branches).
func (c Carrier) Set(key, value string) {
	*c.Headers = withHeader(*c.Headers, key, []byte(value), 0)
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

// traceContext reads and writes traceparent and tracestate only.
var traceContext propagation.TextMapPropagator = propagation.TraceContext{}

// ExtractTraceContext returns ctx with the span context that e's
// traceparent and tracestate headers carry, as Extract does, but reads
// no baggage: it is what a stage needs to start a span in the message's
// trace, and it costs the same whatever baggage the message carries (a
// producer's 8 KB one would cost a parse of each of its members for
// every message). The baggage header travels on in the message as it
// came. The sources' receive spans and sluice's stages use it.
func ExtractTraceContext(ctx context.Context, e *stream.Envelope) context.Context {
	if len(e.Headers) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, Carrier{Headers: &e.Headers})
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

// withHeader returns a copy of hs with the header key set to v (see
// putHeader), with room for spare more headers. hs's array is not
// written.
func withHeader(hs []stream.Header, key string, v []byte, spare int) []stream.Header {
	n := make([]stream.Header, len(hs), len(hs)+1+spare)
	copy(n, hs)
	return putHeader(n, key, v)
}

// putHeader sets the header key of hs to v, in place: it replaces the
// first header of that key and removes the others, or appends one. A
// reader that takes the last header of a key (as the Java client's
// lastHeader does) and one that takes the first then read the same value.
// hs's array must be the message's own.
func putHeader(hs []stream.Header, key string, v []byte) []stream.Header {
	i := 0
	for i < len(hs) && hs[i].Key != key {
		i++
	}
	if i == len(hs) {
		return append(hs, stream.Header{Key: key, Value: v})
	}
	hs[i].Value = v
	n := i + 1
	for _, h := range hs[i+1:] {
		if h.Key != key {
			hs[n] = h
			n++
		}
	}
	clear(hs[n:]) // what was removed is not kept reachable
	return hs[:n]
}

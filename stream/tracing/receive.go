package tracing

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
)

// Receiver starts the receive span of each message a source reads. A
// source makes one when it starts, if its pipeline traces
// (stream.Outlet.TracerProvider is not nil), and calls Receive for each
// message from its reading goroutine: a Receiver is not safe for
// concurrent use.
type Receiver struct {
	tracer trace.Tracer
	system attribute.KeyValue
	kafka  bool // offsets are Kafka offsets
	// The span name of the last topic, so that a run of messages of one
	// topic builds it once.
	topic, name string
	attrs       []attribute.KeyValue // reused for each message
	opts        []trace.SpanStartOption
	kind        trace.SpanStartOption
	// The slab the traceparent values are cut from, so that a message
	// costs one allocation (its header slice), not two. It holds only
	// the values' text, no pointer: a message still held keeps no other
	// message's data reachable through it, only its neighbours'
	// traceparents (64 of 55 bytes).
	bytes []byte
}

// NewReceiver returns a Receiver whose spans come from tp and say the
// messages come from system (messaging.system: "kafka", "redis"); nil if
// tracing is off (!Enabled(tp)).
func NewReceiver(tp trace.TracerProvider, system string) *Receiver {
	if !Enabled(tp) {
		return nil
	}
	return &Receiver{tracer: tp.Tracer(ScopeName), system: semconv.MessagingSystemKey.String(system),
		kafka: system == "kafka", kind: trace.WithSpanKind(trace.SpanKindConsumer)}
}

// Receive starts and ends the receive span of the message e, then writes
// the span's context into e's traceparent (and tracestate) header.
//
// The span, named "receive <topic>" (kind consumer), is a child of the
// span e's headers name, or the root of a new trace if they name none or
// a malformed one (a span in ctx is no parent: ctx is for cancellation); the provider's sampler decides whether it is recorded.
// It starts at e.Timestamp if that is in the past, so that its length is
// the message's wait in the broker (on the clock that stamped it: the
// producer's, unless the broker stamps the log append time), and ends now.
// It carries the messaging attributes: messaging.system,
// messaging.operation.type "receive", messaging.destination.name (the
// topic or stream), messaging.destination.partition.id and
// messaging.kafka.offset for Kafka, and attrs (a consumer
// group, a lag, a message id).
//
// The span ends at once, so that no span stays open for a message that is
// dropped, or whose partition is revoked, before it is settled; the spans
// of the stages the message goes through, children of this one, show
// where its time went after it was read.
func (r *Receiver) Receive(_ context.Context, e *stream.Envelope, attrs ...attribute.KeyValue) {
	now := time.Now()
	start := now
	if !e.Timestamp.IsZero() && e.Timestamp.Before(now) {
		start = e.Timestamp
	}
	if e.Topic != r.topic || r.name == "" {
		r.topic, r.name = e.Topic, "receive "+e.Topic
	}
	// The attributes are set only on a span that records: building them
	// into the start options cost an allocation for each of the many
	// spans a ratio sampler drops.
	r.opts = append(r.opts[:0], r.kind, trace.WithTimestamp(start))
	// The parent is the record's, never a span of ctx: a pipeline run
	// under a span (a job's) does not make every message its child. Its
	// baggage is not read: the span needs none.
	_, span := r.tracer.Start(ExtractTraceContext(context.Background(), e), r.name, r.opts...)
	if span.IsRecording() {
		a := append(r.attrs[:0], r.system, semconv.MessagingOperationTypeReceive, semconv.MessagingDestinationName(e.Topic))
		if r.kafka {
			a = append(a, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(e.Partition))), semconv.MessagingKafkaOffset(int(e.Offset)))
		}
		a = append(a, attrs...)
		r.attrs = a
		span.SetAttributes(a...)
		span.End(trace.WithTimestamp(now))
	} else {
		span.End() // a span that does not record keeps no time
	}
	r.inject(span.SpanContext(), e)
}

// inject writes the trace context of sc into e's headers: traceparent,
// and tracestate if sc has one, in a new header slice of e's own (the one
// allocation of a traced message). The headers e came with are never
// written, as they may be shared (with the record, with other messages);
// and the new slice is no cut of a slab shared with other messages, which
// would keep their header values reachable, and what those point into
// (for the Kafka source, whole fetch responses), for as long as any of
// them is held (in a retry's wait, a slow sink).
func (r *Receiver) inject(sc trace.SpanContext, e *stream.Envelope) {
	if !sc.IsValid() {
		return
	}
	if len(r.bytes) < traceParentLen {
		r.bytes = make([]byte, 64*traceParentLen)
	}
	b := r.bytes[:traceParentLen:traceParentLen]
	r.bytes = r.bytes[traceParentLen:]
	formatTraceParent(b, sc)
	ts := sc.TraceState()
	spare := 0
	if ts.Len() > 0 {
		spare = 1
	}
	hs := withHeader(e.Headers, TraceParent, b, spare)
	if ts.Len() > 0 {
		hs = putHeader(hs, TraceState, []byte(ts.String()))
	}
	e.Headers = hs
}

package kafka

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// A failure sink (a dead letter, a parking, a failure queue) in a traced
// pipeline (stream.WithTracerProvider) records, for each message it
// writes, a producer span in the message's trace, from the hand-over to
// the client to the broker's answer: "dead-letter <topic>", "park
// <topic>" or "failure <topic>", with the failure's stage, reason,
// attempts and transience when the message is a stream.Failure. A trace
// then ends where its message left the pipeline. The sink of results
// starts none: the record it writes carries the trace in its headers.

// failureTracer is a failure sink's tracer; nil when the pipeline does
// not trace or the sink writes results.
type failureTracer struct {
	tracer trace.Tracer
	verb   string
	system attribute.KeyValue
	opts   []trace.SpanStartOption
}

func newFailureTracer(tp trace.TracerProvider, outcome stream.Outcome, name, system string) *failureTracer {
	if tp == nil || outcome == stream.Completed {
		return nil
	}
	verb := "failure"
	switch {
	case outcome == stream.Parked:
		verb = "park"
	case name == "kafka-dead-letter":
		verb = "dead-letter"
	}
	return &failureTracer{tracer: tp.Tracer(tracing.ScopeName), verb: verb, system: semconv.MessagingSystemKey.String(system),
		opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}}
}

// start opens the span of m's record to topic; its end is called with
// the broker's answer. It returns nil for a message whose trace is not
// sampled.
func (t *failureTracer) start(m *stream.Envelope, value any, topic string) func(error) {
	if tracing.NotSampled(m) {
		return nil
	}
	_, span := t.tracer.Start(tracing.ExtractTraceContext(context.Background(), m), t.verb+" "+topic, t.opts...)
	if !span.IsRecording() {
		span.End()
		return nil
	}
	span.SetAttributes(t.system, semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(topic))
	if f, ok := value.(stream.Failure); ok {
		as := []attribute.KeyValue{attribute.String("sluice.failure.stage", f.Stage), attribute.Int("sluice.attempts", f.Attempts),
			attribute.Bool("sluice.failure.transient", f.Transient)}
		if f.Err != nil {
			as = append(as, attribute.String("sluice.failure.reason", f.Err.Error()))
		}
		if !f.NotBefore.IsZero() {
			as = append(as, attribute.String("sluice.failure.not_before", f.NotBefore.UTC().Format("2006-01-02T15:04:05.000Z07:00")))
		}
		span.SetAttributes(as...)
	}
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not written")
		}
		span.End()
	}
}

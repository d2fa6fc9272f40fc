package flow

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// With tracing on (stream.WithTracerProvider), MapAsync starts a span for
// each message, named after the stage (its stream.Name), when it takes
// the message in, child of the context the message's traceparent names
// (the source's receive span), and ends it when the message leaves:
// emitted, failed, or left unsettled because the stage stopped. Its
// function gets a context carrying the span, so that a call it makes with
// that context (an HTTP request through TracedTransport) is the span's
// child. The span's events tell the
// attempts, their failures, the breaker's refusals and the retries with
// their waits. Off, a job's span is nil and nothing of this runs.

// The span attributes and events, for a reader to find them here.
const (
	attrAttempt    = attribute.Key("sluice.attempt")
	attrAttempts   = attribute.Key("sluice.attempts")
	attrReason     = attribute.Key("sluice.retry.reason")
	attrDelay      = attribute.Key("sluice.retry.delay_seconds")
	attrRetryAfter = attribute.Key("sluice.retry_after_seconds")
	attrTransient  = attribute.Key("sluice.failure.transient")
	attrStage      = attribute.Key("sluice.stage")
)

// asyncTracer is a run's tracing state: the tracer and the jobs whose
// spans are open, to end those the stage holds when it stops.
type asyncTracer struct {
	tracer trace.Tracer
	name   string
	stage  attribute.KeyValue
	open   map[any]trace.Span
}

func newAsyncTracer(tp trace.TracerProvider, name string) *asyncTracer {
	if tp == nil {
		return nil
	}
	return &asyncTracer{tracer: tp.Tracer(tracing.ScopeName), name: name, stage: attrStage.String(name), open: map[any]trace.Span{}}
}

// start opens the span of the message e, kept under job.
func (t *asyncTracer) start(job any, e *stream.Envelope) trace.Span {
	// The parent is the message's, never a span of the stage's context:
	// a pipeline run under a span (a job's) does not make every message
	// its child.
	_, span := t.tracer.Start(tracing.ExtractTraceContext(context.Background(), e), t.name, trace.WithAttributes(t.stage))
	t.open[job] = span
	return span
}

// end closes job's span with the message's outcome: err nil for a result
// handed on.
func (t *asyncTracer) end(job any, span trace.Span, attempts int, err error, transient bool) {
	delete(t.open, job)
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attrAttempts.Int(attempts))
	if err != nil {
		span.SetAttributes(attrTransient.Bool(transient))
		span.RecordError(err)
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}

// stopped ends the spans of the messages the stage held when it stopped:
// they stay unsettled, to be replayed.
func (t *asyncTracer) stopped() {
	for job, span := range t.open {
		span.AddEvent("stage stopped: message left unsettled, to be replayed")
		span.End()
		delete(t.open, job)
	}
}

// attempt records the start of an attempt, and returns ctx carrying the
// span and the attempt's number (for TracedTransport's resend count),
// keeping the AfterFunc of the stage's call context visible (see
// afterFuncCtx).
func attemptContext(ctx context.Context, span trace.Span, attempt int) context.Context {
	if span.IsRecording() {
		span.AddEvent("attempt", trace.WithAttributes(attrAttempt.Int(attempt)))
	}
	return keepAfterFunc(&tracedCtx{Context: trace.ContextWithSpan(ctx, span), attempt: attempt}, ctx)
}

// attemptKey is the context key of an attempt's number.
type attemptKey struct{}

type tracedCtx struct {
	context.Context
	attempt int
}

func (c *tracedCtx) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return c.attempt
	}
	return c.Context.Value(key)
}

// attemptOf returns the number of the attempt ctx belongs to (1 the
// first), 0 if it belongs to none a traced MapAsync made.
func attemptOf(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}

// failed records an attempt's failure and how it was classified.
func failedEvent(span trace.Span, attempt int, err error, c stream.Classification) {
	if !span.IsRecording() {
		return
	}
	as := []attribute.KeyValue{attrAttempt.Int(attempt), attribute.String("exception.message", err.Error()),
		attrTransient.Bool(c.Transient)}
	if c.Reason != "" {
		as = append(as, attrReason.String(string(c.Reason)))
	}
	if c.RetryAfter > 0 {
		as = append(as, attrRetryAfter.Float64(c.RetryAfter.Seconds()))
	}
	span.AddEvent("attempt failed", trace.WithAttributes(as...))
}

// refusedEvent records an attempt the circuit breaker refused.
func refusedEvent(span trace.Span, attempt int, err error) {
	if span.IsRecording() {
		span.AddEvent("breaker refused", trace.WithAttributes(attrAttempt.Int(attempt), attribute.String("exception.message", err.Error())))
	}
}

// retryEvent records a retry scheduled after delay.
func retryEvent(span trace.Span, attempt int, reason stream.Reason, delay time.Duration) {
	if span.IsRecording() {
		span.AddEvent("retry", trace.WithAttributes(attrAttempt.Int(attempt), attrReason.String(string(reason)), attrDelay.Float64(delay.Seconds())))
	}
}

// sampledTraceID is span's trace id if its trace is sampled, "" otherwise.
func sampledTraceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}

package loadgen

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream/tracing"
)

// sender starts the trace of each request it produces: a span "send
// <topic>" (kind producer) from the produce to the brokers' answer, whose
// context the record carries in its traceparent header, so that the
// workers continue the request's trace from its production. The provider's
// sampler decides which requests are traced; an unsampled one still
// carries its traceparent (sampled flag off), and the workers, sampling
// parent-based, follow that decision.
type sender struct {
	tracer trace.Tracer
	kind   trace.SpanStartOption
	system string // messaging.system: "kafka", "redis"
}

// newSender returns the sender of tp's spans to system (messaging.system);
// nil (no spans, no headers) if tp is nil or a nil pointer
// (tracing.Enabled).
func newSender(tp trace.TracerProvider, system string) *sender {
	if !tracing.Enabled(tp) {
		return nil
	}
	return &sender{tracer: tp.Tracer(tracing.ScopeName + "/pipelines/loadgen"), kind: trace.WithSpanKind(trace.SpanKindProducer), system: system}
}

// start starts r's send span and writes its traceparent into r's headers;
// the returned function ends the span with the produce's outcome.
func (s *sender) start(ctx context.Context, r *kgo.Record, kind Kind) func(error) {
	if s == nil {
		return func(error) {}
	}
	ctx, span := s.tracer.Start(ctx, "send "+r.Topic, s.kind)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", s.system),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", r.Topic),
			attribute.String("sluice.delivery.id", string(r.Key)),
			attribute.String("sluice.request.kind", kind.String()))
		if s.system == "kafka" {
			span.SetAttributes(attribute.String("messaging.kafka.message.key", string(r.Key)))
		}
	}
	tracing.Propagator().Inject(ctx, recordCarrier{r})
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// recordCarrier is a propagation.TextMapCarrier over a record's headers.
type recordCarrier struct{ r *kgo.Record }

func (c recordCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(key, value string) {
	for i := range c.r.Headers {
		if c.r.Headers[i].Key == key {
			c.r.Headers[i].Value = []byte(value)
			return
		}
	}
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c recordCarrier) Keys() []string {
	keys := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		keys[i] = h.Key
	}
	return keys
}

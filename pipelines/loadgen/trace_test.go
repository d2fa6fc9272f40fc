package loadgen

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// recordingProducer keeps the records and acknowledges them, failing
// those whose key is fail.
type recordingProducer struct {
	mu      sync.Mutex
	fail    string
	records []*kgo.Record
}

func (p *recordingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	p.records = append(p.records, r)
	p.mu.Unlock()
	if string(r.Key) == p.fail {
		promise(r, errLostReply)
		return
	}
	promise(r, nil)
}

func (p *recordingProducer) Flush(context.Context) error { return nil }

// With a TracerProvider, each request is the root of a trace: a send
// span, ended with the produce's outcome, whose traceparent the record
// carries.
func TestRunStartsATracePerRequest(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	p := &recordingProducer{fail: deliveryID(3)}
	cfg := Config{Topic: "requests", Rate: 1000, Duration: 50 * time.Millisecond, Seed: 1, TracerProvider: tp}
	if err := Run(context.Background(), p, cfg, NewSent()); !errors.Is(err, errLostReply) {
		t.Fatalf("Run = %v, want the failed produce", err)
	}
	spans := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.SpanContext.SpanID()] = s
	}
	if len(p.records) < 4 || len(spans) != len(p.records) {
		t.Fatalf("%d records produced and %d spans, want a span for each of at least 4", len(p.records), len(spans))
	}
	traces := map[trace.TraceID]bool{}
	for _, r := range p.records {
		var hs []stream.Header
		for _, h := range r.Headers {
			hs = append(hs, stream.Header{Key: h.Key, Value: h.Value})
		}
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), &stream.Envelope{Headers: hs}))
		s, ok := spans[sc.SpanID()]
		if !ok || !sc.IsSampled() || s.Name != "send requests" || s.SpanKind != trace.SpanKindProducer || s.Parent.IsValid() {
			t.Fatalf("record %s carries %v, want the context of its own root send span (%+v)", r.Key, sc, s)
		}
		if failed := s.Status.Code == codes.Error; failed != (string(r.Key) == p.fail) {
			t.Errorf("record %s: span status %v", r.Key, s.Status)
		}
		traces[sc.TraceID()] = true
	}
	if len(traces) != len(p.records) {
		t.Fatalf("%d traces for %d requests, want one each", len(traces), len(p.records))
	}
}

// Without one, records carry no trace headers.
// Without a provider, or with a nil *sdktrace.TracerProvider (a program
// that builds one only when asked to trace), no record has a header.
func TestRunWithoutTracingWritesNoHeaders(t *testing.T) {
	var nilSDK *sdktrace.TracerProvider
	for _, tp := range []trace.TracerProvider{nil, nilSDK} {
		p := &recordingProducer{}
		cfg := Config{Topic: "requests", Rate: 1000, Duration: 20 * time.Millisecond, Seed: 1, TracerProvider: tp}
		if err := Run(context.Background(), p, cfg, NewSent()); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.records {
			if len(r.Headers) != 0 {
				t.Fatalf("record %s has headers %v without tracing (provider %#v)", r.Key, r.Headers, tp)
			}
		}
	}
}

// redisProducer is a producer to Redis streams, which says so.
type redisProducer struct{ *recordingProducer }

func (redisProducer) MessagingSystem() string { return "redis" }

// A send span names the system the producer writes to: Kafka's record
// key attribute only on Kafka; the request's id on every system.
func TestSendSpanNamesTheProducersSystem(t *testing.T) {
	for _, system := range []string{"kafka", "redis"} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		var p kafkasink.Producer = &recordingProducer{}
		if system == "redis" {
			p = redisProducer{&recordingProducer{}}
		}
		cfg := Config{Topic: "requests", Rate: 1000, Duration: 20 * time.Millisecond, Seed: 1, TracerProvider: tp}
		if err := Run(context.Background(), p, cfg, NewSent()); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		_ = tp.Shutdown(context.Background())
		if len(spans) == 0 {
			t.Fatalf("%s: no send span", system)
		}
		for _, s := range spans {
			attrs := map[string]string{}
			for _, kv := range s.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			_, kafkaKey := attrs["messaging.kafka.message.key"]
			if attrs["messaging.system"] != system || kafkaKey != (system == "kafka") || attrs["sluice.delivery.id"] == "" {
				t.Fatalf("%s: send span attributes %v", system, attrs)
			}
		}
	}
}

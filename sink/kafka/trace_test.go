package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	kafkasource "github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// One message through Kafka -> MapAsync (an HTTP call, retried once) ->
// Kafka is one trace: the source's receive span, the stage's span, a span
// per HTTP attempt, and the produced record's traceparent names that trace.
// A failed message's dead letter carries its trace; a malformed
// traceparent starts a new trace and the message is processed.
func TestOneTraceFromSourceThroughServiceToSink(t *testing.T) {
	const (
		okTrace, deadTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
		producerSpan       = "00f067aa0ba902b7"
	)
	brokers := testenv.Kfake(t, 1, "in", "out", "dead")
	in := []*kgo.Record{
		{Topic: "in", Value: []byte("ok"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + okTrace + "-" + producerSpan + "-01")}}},
		{Topic: "in", Value: []byte("malformed"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-not-a-trace-01")}}},
		{Topic: "in", Value: []byte("refused"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + deadTrace + "-" + producerSpan + "-01")}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testenv.ProduceAll(ctx, client(t, brokers), len(in), func(i int) *kgo.Record { return in[i] }); err != nil {
		t.Fatal(err)
	}
	var okCalls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refused":
			w.WriteHeader(http.StatusBadRequest)
		case "/ok":
			if okCalls.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
	}))
	defer srv.Close()
	httpc := &http.Client{Transport: flow.TracedTransport(nil), Timeout: 5 * time.Second}
	call := func(ctx context.Context, v []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/"+string(v), nil)
		if err != nil {
			return nil, err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return v, flow.CheckResponse(resp)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	quiet := slog.New(slog.DiscardHandler)
	src, err := kafkasource.NewSource(ctx, kafkasource.Config{Conn: kafkasource.Conn{Brokers: brokers}, Group: "traced", Topics: []string{"in"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	prod := client(t, brokers)
	g := stream.New(stream.WithTracerProvider(tp), stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, src), flow.MapAsync(4, call,
		flow.Retry(flow.RetryPolicy{Strategy: flow.Exponential, Jitter: flow.NoJitter, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond})))
	stream.To(s, kafkasink.NewSink(prod, kafkasink.Records("out")))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(prod, "dead"))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	out := readAll(t, brokers, "out", 2)
	dead := readAll(t, brokers, "dead", 1)
	stop()
	if err := <-done; err != nil && runCtx.Err() == nil {
		t.Fatal(err)
	}

	traceparent := func(r *kgo.Record) []string {
		for _, h := range r.Headers {
			if h.Key == "traceparent" {
				return strings.Split(string(h.Value), "-")
			}
		}
		t.Fatalf("record %q has no traceparent: %v", r.Value, r.Headers)
		return nil
	}
	spans := exp.GetSpans()
	byID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
	}
	for _, r := range out {
		tp := traceparent(r)
		switch string(r.Value) {
		case "ok":
			if tp[1] != okTrace {
				t.Fatalf("the produced record left its trace: %v", tp)
			}
			recv, ok := byID[tp[2]]
			if !ok || recv.Name != "receive in" || recv.Parent.SpanID().String() != producerSpan {
				t.Fatalf("the produced record's traceparent names %q (parent %v)", recv.Name, recv.Parent.SpanID())
			}
			var stage tracetest.SpanStub
			var attempts []tracetest.SpanStub
			for _, s := range spans {
				if s.SpanContext.TraceID().String() != okTrace {
					continue
				}
				switch {
				case s.Name == "map-async" && s.Parent.SpanID() == recv.SpanContext.SpanID():
					stage = s
				case s.Name == http.MethodPost:
					attempts = append(attempts, s)
				}
			}
			if !stage.SpanContext.IsValid() || len(attempts) != 2 {
				t.Fatalf("trace %s: stage span %v, %d HTTP spans (of %d spans)", okTrace, stage.SpanContext.IsValid(), len(attempts), len(spans))
			}
			for _, a := range attempts {
				if a.Parent.SpanID() != stage.SpanContext.SpanID() {
					t.Errorf("an HTTP span is not the stage span's child")
				}
			}
		case "malformed":
			if tp[1] == okTrace || tp[1] == deadTrace || len(tp[1]) != 32 || byID[tp[2]].Parent.IsValid() {
				t.Errorf("a malformed traceparent was continued: %v", tp)
			}
		default:
			t.Errorf("unexpected output %q", r.Value)
		}
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters", len(dead))
	}
	dtp := traceparent(dead[0])
	if dtp[1] != deadTrace || byID[dtp[2]].Name != "receive in" {
		t.Errorf("the dead letter's traceparent %v does not continue its message's trace", dtp)
	}
	var deadSpans []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "dead-letter dead" {
			deadSpans = append(deadSpans, s)
		}
	}
	if len(deadSpans) != 1 || deadSpans[0].SpanContext.TraceID().String() != deadTrace || deadSpans[0].Parent.SpanID().String() != dtp[2] {
		t.Fatalf("dead letter spans %+v", deadSpans)
	}
	attrs := map[string]string{}
	for _, kv := range deadSpans[0].Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["sluice.failure.stage"] != "map-async" || !strings.Contains(attrs["sluice.failure.reason"], "400") ||
		attrs["sluice.failure.transient"] != "false" || attrs["messaging.destination.name"] != "dead" {
		t.Errorf("dead letter span attributes %v", attrs)
	}
}

// otherSystem is a Producer writing to a system other than Kafka, which
// says so (as sink/redisstream's does).
type otherSystem struct{ kafkasink.Producer }

func (otherSystem) MessagingSystem() string { return "redis" }

// A parking in a traced pipeline ends its message's trace with a span of
// the write, saying the failure was transient and naming the system its
// producer writes to; untraced it starts none.
func TestParkingSpan(t *testing.T) {
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, c := range []struct {
		traced bool
		system string
	}{{true, "kafka"}, {true, "redis"}, {false, "kafka"}} {
		traced := c.traced
		brokers := testenv.Kfake(t, 1, "parked")
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		opts := []stream.Option{stream.WithLogger(slog.New(slog.DiscardHandler))}
		if traced {
			opts = append(opts, stream.WithTracerProvider(tp))
		}
		g := stream.New(opts...)
		src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
			m := stream.Message[[]byte]{Value: []byte("v")}
			m.Headers = []stream.Header{{Key: "traceparent", Value: []byte("00-" + trace + "-00f067aa0ba902b7-01")}}
			return out.Send(ctx, m)
		})
		fail := stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
			for {
				b, err := in.Recv(ctx)
				if err != nil {
					return nil
				}
				for _, m := range b.Items {
					if err := in.FailWith(ctx, m, stream.Failure{Err: errors.New("service unavailable"), Transient: true, Attempts: 3}); err != nil {
						return err
					}
				}
				b.Release()
			}
		})
		stream.To(stream.Via(stream.From(g, src), fail, stream.Name("call")), kafkasink.NewSink(client(t, brokers), kafkasink.Records("parked")))
		var parking kafkasink.Producer = client(t, brokers)
		if c.system != "kafka" {
			parking = otherSystem{parking}
		}
		stream.To(g.Failures(), kafkasink.NewParking(parking, "parked", time.Minute))
		if err := g.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		_ = tp.Shutdown(context.Background()) // clears exp
		if !traced {
			if len(spans) != 0 {
				t.Fatalf("untraced: %d spans", len(spans))
			}
			continue
		}
		if len(spans) != 1 || spans[0].Name != "park parked" || spans[0].SpanContext.TraceID().String() != trace {
			t.Fatalf("spans %+v", spans)
		}
		attrs := map[string]string{}
		for _, kv := range spans[0].Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["sluice.failure.transient"] != "true" || attrs["sluice.failure.stage"] != "call" || attrs["sluice.attempts"] != "3" ||
			attrs["messaging.system"] != c.system {
			t.Errorf("attributes %v", attrs)
		}
	}
}

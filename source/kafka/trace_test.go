package kafka_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

const parentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// With tracing on, the source ends one receive span per record, child of
// the record's traceparent (a new trace for a malformed one or none), and
// hands the message on with the span's context as its traceparent.
func TestSourceTracesEachRecord(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	parents := []string{"00-" + parentTrace + "-00f067aa0ba902b7-01", "00-1-01", ""}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = testenv.ProduceAll(ctx, cl, len(parents), func(i int) *kgo.Record {
		r := &kgo.Record{Topic: "in", Key: []byte{byte('a' + i)}, Value: []byte{byte('a' + i)}}
		if parents[i] != "" {
			r.Headers = []kgo.RecordHeader{{Key: "tenant", Value: []byte("t")}, {Key: "traceparent", Value: []byte(parents[i])}}
		}
		return r
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	src := newSource(t, brokers, "traced")
	var mu sync.Mutex
	got := map[string]stream.Envelope{}
	g := stream.New(stream.WithLogger(quiet), stream.WithTracerProvider(tp))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				mu.Lock()
				got[string(b.Items[i].Value)] = b.Items[i].Envelope
				if len(got) == len(parents) {
					cancel()
				}
				mu.Unlock()
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
		}
	}))
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(got) != len(parents) || len(spans) != len(parents) {
		t.Fatalf("%d messages, %d spans; want %d of each", len(got), len(spans), len(parents))
	}
	byID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.Name != "receive in" || attrs["messaging.system"] != "kafka" || attrs["messaging.consumer.group.name"] != "traced" ||
			attrs["messaging.destination.name"] != "in" || attrs["messaging.kafka.offset"] == "" || attrs["sluice.partition.lag"] == "" {
			t.Errorf("span %q attributes %v", s.Name, attrs)
		}
	}
	for i, p := range parents {
		e := got[string([]byte{byte('a' + i)})]
		tp := string(e.Header(tracing.TraceParent))
		parts := strings.Split(tp, "-")
		if len(parts) != 4 {
			t.Fatalf("record %d: traceparent %q", i, tp)
		}
		s, ok := byID[parts[2]]
		if !ok || s.SpanContext.TraceID().String() != parts[1] {
			t.Fatalf("record %d: traceparent %q names no span of its trace", i, tp)
		}
		if wantParent := i == 0; s.Parent.IsValid() != wantParent || (wantParent && parts[1] != parentTrace) {
			t.Errorf("record %d (traceparent %q): span parent %v, trace %s", i, p, s.Parent.SpanID(), parts[1])
		}
		if p != "" && string(e.Header("tenant")) != "t" {
			t.Errorf("record %d lost its other headers: %+v", i, e.Headers)
		}
	}
}

// Off, the source hands the record's headers on as they came.
func TestSourceUntracedLeavesHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = testenv.ProduceAll(ctx, cl, 1, func(int) *kgo.Record {
		return &kgo.Record{Topic: "in", Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-1-01")}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, brokers, "untraced")
	var hs []stream.Header
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		b, err := in.Recv(ctx)
		if err != nil {
			return nil
		}
		hs = b.Items[0].Headers
		in.Settle(&b.Items[0], stream.Completed)
		b.Release()
		cancel()
		return nil
	}))
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	_ = src.Close(context.Background())
	if len(hs) != 1 || string(hs[0].Value) != "00-1-01" {
		t.Fatalf("headers %+v", hs)
	}
}

// The owned source (Assigned) traces as the group source does, without a
// group.
func TestAssignedTracesEachRecord(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 3, func(i int) []byte { return []byte{byte('a' + i)} })
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := kafka.NewAssigned(ctx, kafka.AssignedConfig{Conn: kafka.Conn{Brokers: brokers}, Topic: "in", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Start(0, -1)
	n := 0
	g := stream.New(stream.WithLogger(quiet), stream.WithTracerProvider(tp))
	stream.To(stream.From(g, a), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				if b.Items[i].Header(tracing.TraceParent) == nil {
					t.Errorf("message %d has no traceparent", n)
				}
				in.Settle(&b.Items[i], stream.Completed)
				if n++; n == 3 {
					cancel()
				}
			}
			b.Release()
		}
	}))
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == "messaging.consumer.group.name" {
				t.Errorf("an assigned source's span names a group %q", kv.Value.Emit())
			}
		}
	}
}

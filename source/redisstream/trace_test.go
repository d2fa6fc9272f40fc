package redisstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// With tracing on, the source ends a receive span per entry, child of the
// entry's traceparent field, and hands the message on carrying the span's
// context.
func TestSourceTracesEachEntry(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, hs := range [][]stream.Header{{{Key: tracing.TraceParent, Value: []byte(parent)}}, {{Key: tracing.TraceParent, Value: []byte("garbage")}}} {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "traced", Values: redisentry.AppendFields(nil, "", nil, []byte("v"), hs)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"traced"}, Group: "g", Consumer: "c", Create: true})
	var got []string
	g := stream.New(stream.WithTracerProvider(tp))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				got = append(got, string(b.Items[i].Header(tracing.TraceParent)))
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
			if len(got) == 2 {
				cancel()
			}
		}
	}))
	if err := g.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(got) != 2 || len(spans) != 2 {
		t.Fatalf("%d messages, %d spans", len(got), len(spans))
	}
	for i, s := range spans {
		want := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"
		if got[i] != want {
			t.Errorf("message %d: traceparent %q, want %q", i, got[i], want)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.Name != "receive traced" || attrs["messaging.system"] != "redis" || attrs["messaging.consumer.group.name"] != "g" ||
			!strings.Contains(attrs["messaging.message.id"], "-") {
			t.Errorf("span %q attributes %v", s.Name, attrs)
		}
	}
	if !strings.Contains(got[0], "4bf92f3577b34da6a3ce929d0e0e4736") || spans[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the first entry left its trace: %q", got[0])
	}
	if spans[1].Parent.IsValid() {
		t.Errorf("a malformed traceparent became a parent")
	}
}

package benchmarks

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// BenchmarkDeliveryTracing runs the delivery system as
// BenchmarkDeliveryPipeline does, at 10,000 requests/s for 10 s, without
// tracing and with tracing that records one trace in a hundred
// (ParentBased(TraceIDRatioBased(0.01)), spans batched to an exporter
// that drops them: the cost of the spans, not of a network). Every request
// still gets a span context and a traceparent; cpu_us/req is the figure to
// compare, completed/s is the rate sent as long as the machine keeps up.
func BenchmarkDeliveryTracing(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "off"
		if traced {
			name = "on_1pct"
		}
		b.Run(fmt.Sprintf("%s_10k", name), func(b *testing.B) {
			var sum demo.Summary
			for b.Loop() {
				var tp *sdktrace.TracerProvider
				if traced {
					tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
						sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				}
				sum = deliveryRun(b, 10_000, "", 10*time.Second, func(c *demo.Config) {
					if tp != nil {
						c.TracerProvider = tp
					}
				})
				if tp != nil {
					_ = tp.Shutdown(context.Background())
				}
			}
			reportDelivery(b, sum)
		})
	}
}

// BenchmarkTracingCost is the engine's part of BenchmarkDeliveryTracing on
// a machine too busy for whole-system figures: a source that starts a
// receive span per message as the Kafka sources do, five MapAsync stages
// (the delivery steps) whose calls do nothing, and a sink, without tracing
// and with one trace in a hundred recorded. cpu_us/msg is the process's CPU
// time per message; the difference is tracing's cost per request, to be
// set against a delivery request's ~41-60 us of CPU.
func BenchmarkTracingCost(b *testing.B) {
	const n = 200_000
	for _, traced := range []bool{false, true} {
		name := "off"
		if traced {
			name = "on_1pct"
		}
		b.Run(name, func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			opts := []stream.Option{}
			if traced {
				tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
					sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				opts = append(opts, stream.WithTracerProvider(tp))
			}
			var el time.Duration
			cpu0 := cpuTime()
			for b.Loop() {
				g := stream.New(opts...)
				src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
					recv := tracing.NewReceiver(out.TracerProvider(), "kafka")
					now := time.Now()
					for i := range n {
						m := out.Slot()
						*m = stream.Message[int]{Value: i}
						m.Topic, m.Offset, m.Timestamp = "requests", int64(i), now
						if recv != nil {
							recv.Receive(ctx, &m.Envelope)
						}
						if err := out.SendSlot(ctx); err != nil {
							return err
						}
					}
					return nil
				})
				s := stream.From(g, src)
				for range 5 {
					s = stream.Via(s, flow.MapAsync(64, func(_ context.Context, x int) (int, error) { return x, nil }))
				}
				stream.To(s, sink.Discard[int]())
				t0 := time.Now()
				if err := g.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
				el += time.Since(t0)
			}
			msgs := float64(b.N) * n
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1000/msgs, "cpu_us/msg")
			b.ReportMetric(msgs/el.Seconds(), "msgs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

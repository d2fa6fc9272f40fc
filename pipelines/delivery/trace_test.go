package delivery_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// With a TracerProvider the scheduler traces each request: its receive
// span and a span per step, named after the step, in one trace; each
// step's span names the request (sluice.delivery.id), which the URLs of
// the checks do not.
func TestSchedulerTracesEachRequest(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	produceRequests(t, producer, 1, time.Time{})
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) { c.TracerProvider = tp })
	p.await(t, "the request completes", 30*time.Second, func() bool { return ledger.LiveCount("deliveries") == 1 })
	p.stop()
	spans := exp.GetSpans()
	names := map[string]bool{}
	ids := map[string]string{}
	var traceID string
	for _, s := range spans {
		if s.Name == "receive requests" {
			traceID = s.SpanContext.TraceID().String()
		}
	}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() == traceID {
			names[s.Name] = true
			for _, kv := range s.Attributes {
				if kv.Key == "sluice.delivery.id" {
					ids[s.Name] = kv.Value.AsString()
				}
			}
		}
	}
	for _, step := range []string{"receive requests", "check_account", "schedule_drone"} {
		if !names[step] {
			t.Errorf("no span %q in the request's trace; spans: %v", step, names)
		}
	}
	for _, step := range []string{"check_account", "check_third_party", "schedule_drone"} {
		if ids[step] == "" || ids[step] != ids["create_delivery"] {
			t.Errorf("step spans' sluice.delivery.id: %v", ids)
		}
	}
}

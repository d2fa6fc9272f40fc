package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/pipelines/demo"
)

// TestDemoTraced runs the demo with a TracerProvider: every request's
// trace starts at the load generator's send span, and the scheduler's
// steps and, for a compensated request, the supervisor's undo continue it.
func TestDemoTraced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for seconds: make test runs it, -short does not")
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	cfg := demo.Defaults(time.Second)
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 300, 0, 0
	cfg.Sim.PermanentRate = 0.02
	cfg.Every, cfg.Drain, cfg.TracerProvider = time.Second, 20*time.Second, tp
	sum, _ := runDemo(t, cfg)
	if !sum.OK() || sum.Completed == 0 || sum.Compensated == 0 {
		t.Fatalf("want requests completed and compensated: %s", sum)
	}
	type seen struct{ send, delivered, undone bool }
	traces := map[trace.TraceID]*seen{}
	for _, s := range exp.GetSpans() {
		tid := s.SpanContext.TraceID()
		if traces[tid] == nil {
			traces[tid] = &seen{}
		}
		switch {
		case strings.HasPrefix(s.Name, "send ") && !s.Parent.IsValid():
			traces[tid].send = true
		case s.Name == "create_delivery" && s.Status.Code != codes.Error:
			traces[tid].delivered = true
		case s.Name == "undo" || s.Name == "replay-undo":
			traces[tid].undone = true
		}
	}
	var delivered, undone int
	for tid, s := range traces {
		if (s.delivered || s.undone) && !s.send {
			t.Fatalf("trace %s has the scheduler's or the supervisor's spans and no send span at its root", tid)
		}
		if s.delivered {
			delivered++
		}
		if s.undone {
			undone++
		}
	}
	if delivered == 0 || undone == 0 {
		t.Fatalf("%d traces of delivered requests and %d of compensated ones, want some of each", delivered, undone)
	}
	t.Logf("%d traces: %d delivered, %d compensated", len(traces), delivered, undone)
}

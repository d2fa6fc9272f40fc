package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// A window of messages of sampled traces records a span, child of the
// first one's trace and linked to each, and its output carries the span's
// traceparent; messages of unsampled traces are not linked.
func TestWindowTracesWhatItAggregates(t *testing.T) {
	const other = "0af7651916cd43dd8448eb211c80319c"
	tp, exp := tracedProvider(t)
	g := stream.New(stream.WithTracerProvider(tp))
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for i, tp := range []string{parentTP, "00-" + other + "-00f067aa0ba902b7-01", "00-" + other + "-00f067aa0ba902b7-00", ""} {
			m := stream.Message[int]{Value: i}
			m.Timestamp = t0.Add(time.Duration(i) * time.Second)
			if tp != "" {
				m.Headers = []stream.Header{{Key: tracing.TraceParent, Value: []byte(tp)}}
			}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	ws := stream.Via(stream.From(g, src), flow.Tumbling(time.Minute, func(*stream.Message[int]) int { return 0 },
		func(*int) time.Time { return t0 }, func(n *int, _ *int) { *n++ }), stream.Name("per-minute"))
	out := sink.Collect[flow.Windows[int, int]]()
	stream.To(ws, out)
	run(t, g)
	ms := out.Messages()
	spans := exp.GetSpans()
	if len(ms) != 1 || len(spans) != 1 {
		t.Fatalf("%d windows, %d spans", len(ms), len(spans))
	}
	s := spans[0]
	if s.Name != "per-minute" || s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != "00f067aa0ba902b7" || len(s.Links) != 2 ||
		s.Links[1].SpanContext.TraceID().String() != other {
		t.Fatalf("span %q trace %v parent %v links %d", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), len(s.Links))
	}
	want := "00-" + traceID + "-" + s.SpanContext.SpanID().String() + "-01"
	if got := string(ms[0].Header(tracing.TraceParent)); got != want {
		t.Fatalf("the window's traceparent %q, want %q", got, want)
	}
	if a := attrsOf(s); a["sluice.window.messages"] != "4" || a["sluice.window.early"] != "true" {
		t.Errorf("attributes %v", a)
	}
}

// Untraced, a window's output has no headers.
func TestWindowUntraced(t *testing.T) {
	g := stream.New()
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		m := stream.Message[int]{Value: 1, Envelope: stream.Envelope{Timestamp: time.Now(), Headers: []stream.Header{{Key: tracing.TraceParent, Value: []byte(parentTP)}}}}
		return out.Send(ctx, m)
	})
	ws := stream.Via(stream.From(g, src), flow.Tumbling(time.Minute, func(*stream.Message[int]) int { return 0 },
		func(*int) time.Time { return time.Now() }, func(n *int, _ *int) { *n++ }))
	out := sink.Collect[flow.Windows[int, int]]()
	stream.To(ws, out)
	run(t, g)
	if ms := out.Messages(); len(ms) != 1 || len(ms[0].Headers) != 0 {
		t.Fatalf("windows %+v", ms)
	}
}

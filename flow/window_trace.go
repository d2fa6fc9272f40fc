package flow

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// In a traced pipeline (stream.WithTracerProvider) a window that holds
// messages of sampled traces records one span when it is emitted, named
// after the stage, from when its first message arrived to its emission:
// the child of the first such message's trace, linked to each of them (up
// to maxWindowLinks), so that a trace shows its message waiting for its
// window and the window's span names the traces it aggregates. The
// emitted Windows message carries the span's traceparent, so the record a
// sink writes of it continues that trace. A window of unsampled messages
// only records nothing.

// maxWindowLinks bounds the links of a window's span: a window of a
// million messages at 1% would otherwise link ten thousand traces.
const maxWindowLinks = 128

// windowTracer is a window stage's tracing state; nil when off.
type windowTracer struct {
	tracer trace.Tracer
	name   string
}

func newWindowTracer(tp trace.TracerProvider, name string) *windowTracer {
	if tp == nil {
		return nil
	}
	return &windowTracer{tracer: tp.Tracer(tracing.ScopeName), name: name}
}

// windowTrace is what an open window keeps of its messages' traces.
type windowTrace struct {
	opened time.Time
	links  []trace.Link
}

// placed notes the trace of m, placed in a window opened (first placed
// into) at now.
func (t *windowTrace) placed(m *stream.Envelope, now time.Time) {
	if t.opened.IsZero() {
		t.opened = now
	}
	if len(t.links) >= maxWindowLinks || len(m.Headers) == 0 || tracing.NotSampled(m) {
		return
	}
	if sc := trace.SpanContextFromContext(tracing.ExtractTraceContext(context.Background(), m)); sc.IsSampled() {
		t.links = append(t.links, trace.Link{SpanContext: sc})
	}
}

// emitted records the span of a window emitted as ws in m, and writes its
// context into m's headers.
func (wt *windowTracer) emitted(t *windowTrace, m *stream.Envelope, ws windowsInfo) {
	if len(t.links) == 0 {
		return
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), t.links[0].SpanContext)
	ctx, span := wt.tracer.Start(parent, wt.name, trace.WithTimestamp(t.opened), trace.WithLinks(t.links...),
		trace.WithAttributes(
			attribute.String("messaging.destination.name", ws.topic),
			attribute.String("messaging.destination.partition.id", strconv.Itoa(int(ws.partition))),
			attribute.String("sluice.window.start", ws.start.UTC().Format(time.RFC3339Nano)),
			attribute.String("sluice.window.end", ws.end.UTC().Format(time.RFC3339Nano)),
			attribute.Int("sluice.window.messages", ws.count),
			attribute.Int("sluice.window.panes", ws.panes),
			attribute.Bool("sluice.window.early", ws.early)))
	span.End()
	tracing.Inject(ctx, m)
}

// windowsInfo is what a window's span says of it.
type windowsInfo struct {
	topic        string
	partition    int32
	start, end   time.Time
	count, panes int
	early        bool
}

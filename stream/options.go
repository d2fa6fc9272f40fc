package stream

import (
	"log/slog"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Option configures a Graph.
type Option func(*Graph)

// WithCapacity sets the default capacity of every pipe, in messages
// (default DefaultCapacity). A pipe holds at most its capacity rounded up to
// a whole number of batches.
func WithCapacity(n int) Option { return func(g *Graph) { g.capacity = n } }

// WithBatchSize sets the most messages moved in one batch (default
// DefaultBatchSize). Batches are filled opportunistically: a stage hands on
// a partial batch whenever its input is momentarily empty.
func WithBatchSize(n int) Option { return func(g *Graph) { g.batchSize = n } }

// WithDrainTimeout sets how long Run lets stages finish in-flight messages
// after its context is cancelled (default 10s). Sources stop at once.
func WithDrainTimeout(d time.Duration) Option { return func(g *Graph) { g.drainTimeout = d } }

// WithLogger sets the pipeline's logger (default slog.Default()): the
// runner's, the default dead letter's, and that of every stage that logs
// and was given no logger of its own (flow.WithLogger,
// checkpoint.WithLogger), with the stage's name.
func WithLogger(l *slog.Logger) Option { return func(g *Graph) { g.logger = l } }

// WithTracerProvider turns tracing on: the sources that support it (the
// Kafka sources, source/redisstream) start a span for each message, child
// of the W3C traceparent its record carries or a new trace, and write its
// context into the message's traceparent header, so that every later
// stage and every sink (dead letters and parkings too) continues that
// trace; MapAsync starts a span for each message and gives its function a
// context carrying it. tp's sampler decides which traces are recorded
// (an sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)) records one
// in a hundred, and follows a sampled parent). Default: nil, tracing off,
// at the cost of a nil check per message in the sources and MapAsync
// stages that trace. A nil pointer in tp (a
// *sdktrace.TracerProvider a program builds only when asked to trace)
// is nil too: tracing off. See stream/tracing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	if !tracingOn(tp) {
		tp = nil // checked once here, so the stages need check only nil
	}
	return func(g *Graph) { g.tracer = tp }
}

// tracingOn reports whether tp is a provider to trace with: neither nil
// nor a nil pointer (map, func...) in the interface, which would panic at
// its first Tracer call. stream/tracing.Enabled is the same for the
// packages that may import it.
func tracingOn(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	switch v := reflect.ValueOf(tp); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return !v.IsNil()
	}
	return true
}

// WithPipeline names the pipeline in logs and errors (default "pipeline").
// Its metrics' pipeline label is the name given to observe.New.
func WithPipeline(name string) Option { return func(g *Graph) { g.name = name } }

// StageOption configures one stage where it is added to a pipeline.
type StageOption func(*stageConfig)

type stageConfig struct {
	name     string
	capacity int
}

// Name names the stage in errors, logs, statistics and metric labels. The
// default is the stage's own Name() — by convention what its constructor
// makes, in kebab-case: "map", "map-async", "flat-map", "partition-limit",
// "kafka", "checkpoint" — or its Go type, made unique with a #n suffix
// ("map#2").
func Name(name string) StageOption { return func(c *stageConfig) { c.name = name } }

// Buffer sets the capacity, in messages, of the pipe feeding the stage
// (default: the pipeline's WithCapacity).
func Buffer(n int) StageOption { return func(c *stageConfig) { c.capacity = n } }

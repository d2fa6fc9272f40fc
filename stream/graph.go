package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Graph is a pipeline under construction and, once Run is called, running.
// Build it with From, Via, To and the graph helpers; a Graph runs once.
type Graph struct {
	capacity     int
	batchSize    int
	drainTimeout time.Duration
	logger       *slog.Logger
	tracer       trace.TracerProvider // nil: tracing off
	observers    []Observer
	observer     Observer      // the observers as one, set by Run
	traceObs     TraceObserver // observer, if the pipeline traces and it keeps exemplars; set by Run
	name         string

	nodes    []*node
	ports    []portState
	pipes    []interface{ closeIfUnwritten() }
	errs     []error
	names    map[string]int
	pools    map[reflect.Type]any
	failures *port[Failure]
	draining <-chan struct{} // closed when Run was asked to stop; set by Run
	started  atomic.Bool
	mu       sync.Mutex // guards nodes and their ports against Stats while Run prepares
	// build guards the lists Stats reads (the nodes, their inputs, the
	// ports' outlets) against a pipeline still being built while a status
	// page reads it. Taken after mu, never held while calling out.
	build sync.Mutex
}

// Name returns the pipeline's name.
func (g *Graph) Name() string { return g.name }

// New returns an empty pipeline.
func New(opts ...Option) *Graph {
	g := &Graph{
		capacity:     DefaultCapacity,
		batchSize:    DefaultBatchSize,
		drainTimeout: 10 * time.Second,
		logger:       slog.Default(),
		name:         "pipeline",
		names:        map[string]int{},
		pools:        map[reflect.Type]any{},
	}
	for _, o := range opts {
		o(g)
	}
	if g.capacity < 1 {
		g.errorf("", "WithCapacity", "must be at least 1, got %d", g.capacity)
		g.capacity = DefaultCapacity
	}
	if g.batchSize < 1 {
		g.errorf("", "WithBatchSize", "must be at least 1, got %d", g.batchSize)
		g.batchSize = DefaultBatchSize
	}
	if g.drainTimeout < 0 {
		g.errorf("", "WithDrainTimeout", "must not be negative, got %v", g.drainTimeout)
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	g.logger = g.logger.With("pipeline", g.name)
	g.failures = &port[Failure]{g: g, optional: true, failurePath: true}
	return g
}

func (g *Graph) errorf(stage, arg, format string, a ...any) {
	g.errs = append(g.errs, &ConfigError{Stage: stage, Argument: arg, Reason: fmt.Sprintf(format, a...)})
}

// Stream is an output of a stage, waiting to be connected to exactly one
// next stage. Streams are values; connecting the same stream twice is an
// error reported by Run (use Broadcast to feed several stages).
type Stream[T any] struct {
	p *port[T]
}

// Graph returns the pipeline the stream belongs to.
func (s Stream[T]) Graph() *Graph { return s.p.g }

// Via connects s to a flow whose output has the same type; see the function
// Via for flows that change the type.
func (s Stream[T]) Via(f Flow[T, T], opts ...StageOption) Stream[T] { return Via(s, f, opts...) }

// To connects s to a sink.
func (s Stream[T]) To(k Sink[T], opts ...StageOption) { To(s, k, opts...) }

func (g *Graph) stageConfig(stage any, opts []StageOption) stageConfig {
	c := stageConfig{capacity: g.capacity}
	for _, o := range opts {
		o(&c)
	}
	if c.name == "" {
		if n, ok := stage.(Named); ok {
			c.name = n.Name()
		} else {
			c.name = reflect.TypeOf(stage).String()
		}
	}
	if k := g.names[c.name]; k > 0 {
		g.names[c.name] = k + 1
		c.name = fmt.Sprintf("%s#%d", c.name, k+1)
	} else {
		g.names[c.name] = 1
	}
	if c.capacity < 1 {
		g.errorf(c.name, "Buffer", "must be at least 1, got %d", c.capacity)
		c.capacity = g.capacity
	}
	if v, ok := stage.(Validator); ok {
		if err := v.Validate(); err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				ce.Stage = c.name
			} else {
				err = fmt.Errorf("stage %q: %w", c.name, err)
			}
			g.errs = append(g.errs, err)
		}
	}
	return c
}

func poolFor[T any](g *Graph) *batchPool[T] {
	t := reflect.TypeFor[T]()
	if p, ok := g.pools[t]; ok {
		return p.(*batchPool[T])
	}
	p := &batchPool[T]{size: g.batchSize}
	g.pools[t] = p
	return p
}

// From adds a source to g and returns its output.
func From[T any](g *Graph, src Source[T], opts ...StageOption) Stream[T] {
	if src == nil {
		g.errorf("From", "src", "must not be nil")
		src = SourceFunc[T](func(context.Context, *Outlet[T]) error { return nil })
	}
	c := g.stageConfig(src, opts)
	n := g.addNode(c.name, true, false)
	out, s := newOutput[T](g, n)
	n.run = func(ctx context.Context) error { return src.Run(ctx, out) }
	n.value = src
	return s
}

// Via connects s to flow f and returns f's output.
func Via[In, Out any](s Stream[In], f Flow[In, Out], opts ...StageOption) Stream[Out] {
	g := s.p.g
	if f == nil {
		g.errorf("Via", "f", "must not be nil")
		f = FlowFunc[In, Out](func(context.Context, *Inlet[In], *Outlet[Out]) error { return nil })
	}
	c := g.stageConfig(f, opts)
	n := g.addNode(c.name, false, s.p.failurePath)
	in := connect(s, n, c.capacity)
	out, next := newOutput[Out](g, n)
	n.run = func(ctx context.Context) error { return f.Run(ctx, in, out) }
	n.value = f
	return next
}

// To connects s to sink k.
func To[T any](s Stream[T], k Sink[T], opts ...StageOption) {
	g := s.p.g
	if k == nil {
		g.errorf("To", "k", "must not be nil")
		k = SinkFunc[T](func(context.Context, *Inlet[T]) error { return nil })
	}
	c := g.stageConfig(k, opts)
	n := g.addNode(c.name, false, s.p.failurePath)
	in := connect(s, n, c.capacity)
	n.run = func(ctx context.Context) error { return k.Run(ctx, in) }
	n.value = k
}

// Failures returns the pipeline's failure stream: every message that a
// stage failed, as a Failure carrying the reason. Connect it to a dead
// letter (a Kafka topic, a Redis stream) that settles each message after it
// recorded it. Left unconnected, failures go to a dead letter that logs
// each one at Error level and settles it.
func (g *Graph) Failures() Stream[Failure] { return Stream[Failure]{p: g.failures} }

func (g *Graph) addNode(name string, source, failurePath bool) *node {
	n := &node{g: g, name: name, source: source, failurePath: failurePath}
	if !failurePath {
		n.failOut = &Outlet[Failure]{node: n, failure: true}
		n.failPort = &port[Failure]{g: g, optional: true}
		n.failPort.addOutlet(n.failOut)
	}
	g.build.Lock()
	g.nodes = append(g.nodes, n)
	g.build.Unlock()
	return n
}

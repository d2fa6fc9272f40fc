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
)

// Source emits messages into a pipeline. Run sends on out until the input is
// exhausted (return nil) or ctx is cancelled (return ctx.Err() or nil); the
// engine flushes out and closes it when Run returns.
type Source[T any] interface {
	Run(ctx context.Context, out *Outlet[T]) error
}

// Flow transforms messages. Run receives from in until io.EOF and sends
// results on out. A message that does not reach out must be settled (in.Settle)
// or failed (in.Fail) by the flow.
type Flow[In, Out any] interface {
	Run(ctx context.Context, in *Inlet[In], out *Outlet[Out]) error
}

// Sink consumes messages. Run receives from in until io.EOF and settles each
// message once it has been processed.
type Sink[T any] interface {
	Run(ctx context.Context, in *Inlet[T]) error
}

// Named is implemented by stages that have a default name.
type Named interface{ Name() string }

// Validator is implemented by stages whose constructor can be given bad
// arguments: Run calls Validate before starting any goroutine and returns
// its error.
type Validator interface{ Validate() error }

// SourceFunc adapts a function to a Source.
type SourceFunc[T any] func(ctx context.Context, out *Outlet[T]) error

// Run calls f.
func (f SourceFunc[T]) Run(ctx context.Context, out *Outlet[T]) error { return f(ctx, out) }

// FlowFunc adapts a function to a Flow.
type FlowFunc[In, Out any] func(ctx context.Context, in *Inlet[In], out *Outlet[Out]) error

// Run calls f.
func (f FlowFunc[In, Out]) Run(ctx context.Context, in *Inlet[In], out *Outlet[Out]) error {
	return f(ctx, in, out)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc[T any] func(ctx context.Context, in *Inlet[T]) error

// Run calls f.
func (f SinkFunc[T]) Run(ctx context.Context, in *Inlet[T]) error { return f(ctx, in) }

// Graph is a pipeline under construction and, once Run is called, running.
// Build it with From, Via, To and the graph helpers; a Graph runs once.
type Graph struct {
	capacity     int
	batchSize    int
	drainTimeout time.Duration
	logger       *slog.Logger
	observer     Observer
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
}

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

// WithLogger sets the logger of the default dead letter and of the runner
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(g *Graph) { g.logger = l } }

// WithPipeline names the pipeline in logs and metric labels (default
// "pipeline").
func WithPipeline(name string) Option { return func(g *Graph) { g.name = name } }

// Name returns the pipeline's name.
func (g *Graph) Name() string { return g.name }

// WithObserver has the engine report durations to o (see Observer); the
// counters of Stats need no observer. Default: none, which costs nothing.
func WithObserver(o Observer) Option { return func(g *Graph) { g.observer = o } }

// Observer receives the measurements that counters cannot carry:
// durations, for histograms. Its methods are called from stage goroutines
// and must be safe for concurrent use.
type Observer interface {
	// Stage returns the observer of one stage; Run calls it once per stage
	// before starting.
	Stage(name string) StageObserver
	// Latency reports, for a message settled in the pipeline, the time
	// since its Timestamp (the record's time for Kafka messages):
	// end-to-end latency.
	Latency(d time.Duration)
}

// StageObserver receives one stage's measurements.
type StageObserver interface {
	// Processed reports that the stage took d over a batch of n messages,
	// from receiving it to asking for the next (time blocked downstream
	// included).
	Processed(n int, d time.Duration)
}

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
		g.errorf("pipeline", "WithCapacity", "must be at least 1, got %d", g.capacity)
		g.capacity = DefaultCapacity
	}
	if g.batchSize < 1 {
		g.errorf("pipeline", "WithBatchSize", "must be at least 1, got %d", g.batchSize)
		g.batchSize = DefaultBatchSize
	}
	if g.drainTimeout < 0 {
		g.errorf("pipeline", "WithDrainTimeout", "must not be negative, got %v", g.drainTimeout)
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

// StageOption configures one stage where it is added to a pipeline.
type StageOption func(*stageConfig)

type stageConfig struct {
	name     string
	capacity int
}

// Name names the stage in errors, logs and statistics. The default is the
// stage's own Name() or its type, made unique with a #n suffix.
func Name(name string) StageOption { return func(c *stageConfig) { c.name = name } }

// Buffer sets the capacity, in messages, of the pipe feeding the stage
// (default: the pipeline's WithCapacity).
func Buffer(n int) StageOption { return func(c *stageConfig) { c.capacity = n } }

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
	g.nodes = append(g.nodes, n)
	return n
}

// port is a stage output waiting to be connected. A merged port has the
// outlets of several stages.
type port[T any] struct {
	g           *Graph
	outlets     []*Outlet[T]
	pipe        *pipe[T]
	connected   bool
	failurePath bool
	optional    bool     // a failure port: unconnected, it joins the pipeline's failures
	into        *port[T] // set when merged into another port
}

type portState interface {
	isConnected() bool
	isOptional() bool
	writerNames() []string
}

func (p *port[T]) isConnected() bool { return p.connected }
func (p *port[T]) isOptional() bool  { return p.optional }
func (p *port[T]) writerNames() []string {
	var ns []string
	for _, o := range p.outlets {
		ns = append(ns, o.node.name)
	}
	return ns
}

func (p *port[T]) addOutlet(o *Outlet[T]) {
	if p.into != nil {
		p.into.addOutlet(o)
		return
	}
	p.outlets = append(p.outlets, o)
	if p.pipe != nil {
		p.bind(o)
	}
}

func (p *port[T]) bind(o *Outlet[T]) {
	o.p = p.pipe
	o.max = p.pipe.maxBatch
	p.pipe.writers.Add(1)
	o.node.outs = append(o.node.outs, o)
}

func newOutput[T any](g *Graph, n *node) (*Outlet[T], Stream[T]) {
	o := &Outlet[T]{node: n}
	p := &port[T]{g: g, failurePath: n.failurePath}
	p.addOutlet(o)
	g.ports = append(g.ports, p)
	return o, Stream[T]{p: p}
}

// connect creates the pipe from s to the stage n and returns n's inlet.
func connect[T any](s Stream[T], n *node, capacity int) *Inlet[T] {
	p, g := s.p, s.p.g
	if p.connected {
		g.errs = append(g.errs, &ConfigError{Stage: n.name, Argument: "input",
			Reason: fmt.Sprintf("stream of %v is already connected to another stage (use Broadcast to feed several)", p.writerNames())})
		// Give the stage a private, already-closed pipe so the graph stays
		// well formed; Run refuses to start anyway.
		dead := newPipe(poolFor[T](g), 1, 1)
		close(dead.ch)
		return &Inlet[T]{p: dead, node: n}
	}
	p.connected = true
	p.pipe = newPipe(poolFor[T](g), capacity, g.batchSize)
	g.pipes = append(g.pipes, p.pipe)
	for _, o := range p.outlets {
		p.bind(o)
	}
	in := &Inlet[T]{p: p.pipe, node: n}
	n.ins = append(n.ins, in)
	return in
}

// Input connects s to a stage being built with NewStage and returns the
// stage's inlet. It is for writing graph helpers and custom multi-port
// stages; ordinary pipelines use Via and To.
func Input[T any](st *StageBuilder, s Stream[T], opts ...StageOption) *Inlet[T] {
	c := stageConfig{capacity: st.g.capacity}
	for _, o := range opts {
		o(&c)
	}
	if s.p.failurePath {
		st.n.failurePath = true
	}
	return connect(s, st.n, c.capacity)
}

// Output adds an output to a stage being built with NewStage.
func Output[T any](st *StageBuilder) (*Outlet[T], Stream[T]) { return newOutput[T](st.g, st.n) }

// StageBuilder adds a stage with any number of inputs and outputs.
type StageBuilder struct {
	g *Graph
	n *node
}

// NewStage starts a stage named name (made unique) with no ports yet. Add
// ports with Input and Output, then set its function with Run.
func NewStage(g *Graph, name string) *StageBuilder {
	c := g.stageConfig(namedStage(name), nil)
	return &StageBuilder{g: g, n: g.addNode(c.name, false, false)}
}

type namedStage string

func (n namedStage) Name() string { return string(n) }

// Name returns the stage's unique name.
func (st *StageBuilder) Name() string { return st.n.name }

// Errors returns the stage's failure output. Left unconnected, its failures
// join the pipeline's failure stream.
func (st *StageBuilder) Errors() Stream[Failure] {
	if st.n.failPort == nil {
		return Stream[Failure]{p: st.g.failures}
	}
	return Stream[Failure]{p: st.n.failPort}
}

// Run sets the stage's function, which runs on its own goroutine.
func (st *StageBuilder) Run(f func(ctx context.Context) error) { st.n.run = f }

// Invalid records a configuration error for the stage; Run reports it.
func (st *StageBuilder) Invalid(argument, reason string) {
	st.g.errs = append(st.g.errs, &ConfigError{Stage: st.n.name, Argument: argument, Reason: reason})
}

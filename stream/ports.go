package stream

import "fmt"

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
	p.g.build.Lock()
	p.outlets = append(p.outlets, o)
	p.g.build.Unlock()
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
	in := &Inlet[T]{p: p.pipe, node: n, from: p}
	g.build.Lock()
	n.ins = append(n.ins, in)
	g.build.Unlock()
	return in
}

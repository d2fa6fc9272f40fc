package stream

import "context"

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

// Publish makes c the stage's part: Graph.Parts lists it under the stage's
// name, so a metrics package instruments it (a stage built here has no
// source, flow or sink value of its own to publish its numbers).
func (st *StageBuilder) Publish(c Instrumented) {
	st.g.mu.Lock()
	st.n.value = c
	st.g.mu.Unlock()
}

// Invalid records a configuration error for the stage; Run reports it.
func (st *StageBuilder) Invalid(argument, reason string) {
	st.g.errs = append(st.g.errs, &ConfigError{Stage: st.n.name, Argument: argument, Reason: reason})
}

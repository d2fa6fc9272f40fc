package stream

import "context"

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

package sink

import (
	"context"
	"sync"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Discard returns a sink that settles every message as completed and does
// nothing else.
func Discard[T any]() stream.Sink[T] { return discard[T]{} }

type discard[T any] struct{}

func (discard[T]) Name() string { return "discard" }

func (discard[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		in.SettleAll(b.Items, stream.Completed)
		return false, nil
	})
}

// Collector is a sink that keeps every message it receives, for tests and
// examples. Its methods are safe to call while the pipeline runs.
type Collector[T any] struct {
	mu   sync.Mutex
	msgs []stream.Message[T]
}

// Collect returns an empty Collector. It settles each message it keeps as
// stream.Completed, except that a Collector of stream.Failure (connected to
// Graph.Failures or a stage's Errors) settles as stream.DeadLettered: a
// failure kept for inspection left the pipeline as a dead letter, not as
// completed work, and the source's counts and the stage's SettledBy say
// so. Collect[stream.Failure]() is therefore a DeadLetter for tests.
func Collect[T any]() *Collector[T] { return &Collector[T]{} }

// Name returns "collect".
func (c *Collector[T]) Name() string { return "collect" }

// Run stores and settles each message (see Collect for the outcome).
func (c *Collector[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	outcome := stream.Completed
	var zero T
	if _, ok := any(zero).(stream.Failure); ok {
		outcome = stream.DeadLettered
	}
	return stage.ForEach(ctx, in, func(m *stream.Message[T]) error {
		c.mu.Lock()
		c.msgs = append(c.msgs, *m)
		c.mu.Unlock()
		in.Settle(m, outcome)
		return nil
	})
}

// Messages returns a copy of the messages received so far.
func (c *Collector[T]) Messages() []stream.Message[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]stream.Message[T](nil), c.msgs...)
}

// Values returns the values received so far, in arrival order.
func (c *Collector[T]) Values() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := make([]T, len(c.msgs))
	for i := range c.msgs {
		vs[i] = c.msgs[i].Value
	}
	return vs
}

// Func returns a sink that calls fn for each value and settles the message
// as completed when fn returns nil. An error from fn fails the message (it
// goes to the failure stream with the reason); stream.Fatal(err) ends the
// pipeline and leaves the message unsettled. A panic in fn fails the
// message too. fn is called for one message at a time, on the sink's
// goroutine. Func commits nothing: behind a Kafka source, do the work in a
// flow and end the pipeline with sink/checkpoint, which commits what is
// settled; a pipeline without it commits only on a rebalance and at the
// source's Close.
func Func[T any](fn func(ctx context.Context, v T) error) stream.Sink[T] {
	return &funcSink[T]{fn: fn}
}

type funcSink[T any] struct {
	fn func(ctx context.Context, v T) error
}

func (s *funcSink[T]) Name() string { return "func" }

func (s *funcSink[T]) Validate() error {
	if s.fn == nil {
		return stage.NilArg("func", "fn")
	}
	return nil
}

func (s *funcSink[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		for i := 0; i < len(b.Items); {
			next, err := s.apply(ctx, in, b.Items, i)
			if err != nil {
				return false, err
			}
			i = next
		}
		return false, nil
	})
}

// apply calls fn for items[i:]; a panic fails the message that caused it
// and apply returns just past it.
func (s *funcSink[T]) apply(ctx context.Context, in *stream.Inlet[T], items []stream.Message[T], i int) (next int, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = i+1, in.Fail(ctx, items[i], stream.NewPanicError(r))
		}
	}()
	for ; i < len(items); i++ {
		if ferr := s.fn(ctx, items[i].Value); ferr != nil {
			if err := in.Fail(ctx, items[i], ferr); err != nil {
				return i + 1, err
			}
			continue
		}
		in.Settle(&items[i], stream.Completed)
	}
	return i, nil
}

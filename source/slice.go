package source

import (
	"context"

	"github.com/sluice-streams/sluice/stream"
)

// Slice returns a source that emits the values of vs in order, then ends.
// Offsets are the values' indexes (or tracker ids with Track). It takes
// Options only: Rate and Count are Generator's and do not compile here.
func Slice[T any](vs []T, opts ...Option) stream.Source[T] {
	return &sliceSource[T]{vs: vs, c: newConfig("slice", opts)}
}

type sliceSource[T any] struct {
	vs []T
	c  config
}

func (s *sliceSource[T]) Name() string    { return "slice" }
func (s *sliceSource[T]) Validate() error { return s.c.validate() }

func (s *sliceSource[T]) Run(ctx context.Context, out *stream.Outlet[T]) error {
	for i := 0; i < len(s.vs); {
		dst, err := out.Free(ctx)
		if err != nil {
			return err
		}
		k := 0
		for ; k < len(dst) && i < len(s.vs); k, i = k+1, i+1 {
			h, off := s.c.handle(int64(i))
			dst[k] = stream.NewMessage(s.vs[i], h)
			dst[k].Offset = off
		}
		if err := out.Extend(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Channel returns a source that emits the values received from ch until ch
// is closed or the pipeline is cancelled. It takes Options only, as Slice.
func Channel[T any](ch <-chan T, opts ...Option) stream.Source[T] {
	return &chanSource[T]{ch: ch, c: newConfig("channel", opts)}
}

type chanSource[T any] struct {
	ch <-chan T
	c  config
}

func (s *chanSource[T]) Name() string { return "channel" }

func (s *chanSource[T]) Validate() error {
	if s.ch == nil {
		return &stream.ConfigError{Stage: "channel", Argument: "ch", Reason: "must not be nil"}
	}
	return s.c.validate()
}

func (s *chanSource[T]) Run(ctx context.Context, out *stream.Outlet[T]) error {
	var seq int64
	for {
		var (
			v  T
			ok bool
		)
		select {
		case v, ok = <-s.ch:
		default:
			// Nothing waiting: hand on what we have before blocking.
			if err := out.Flush(ctx); err != nil {
				return err
			}
			select {
			case v, ok = <-s.ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok {
			return nil
		}
		h, off := s.c.handle(seq)
		seq++
		m := stream.NewMessage(v, h)
		m.Offset = off
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
}

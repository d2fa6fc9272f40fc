package source

import (
	"context"
	"fmt"
	"time"

	streams "github.com/reugn/go-streams"

	"github.com/sluice-streams/sluice/stream"
)

// GoStreams returns a source that emits the elements of a reugn/go-streams
// source (its connectors). Elements must be of type T; another type ends
// the pipeline with an error naming it. Messages carry no settle handle and
// the element's sequence number as Offset: go-streams sources cannot be
// acknowledged.
//
// A go-streams source has no way to be stopped from outside: when the
// pipeline is cancelled this stage stops reading, and the go-streams
// source's goroutine stays blocked until that source ends on its own.
func GoStreams[T any](src streams.Source) stream.Source[T] {
	return &goStreamsSource[T]{src: src}
}

type goStreamsSource[T any] struct {
	src streams.Source
}

func (s *goStreamsSource[T]) Name() string { return "gostreams" }

func (s *goStreamsSource[T]) Validate() error {
	if s.src == nil {
		return &stream.ConfigError{Stage: "gostreams", Argument: "src", Reason: "must not be nil"}
	}
	return nil
}

func (s *goStreamsSource[T]) Run(ctx context.Context, out *stream.Outlet[T]) error {
	var seq int64
	for {
		var (
			v  any
			ok bool
		)
		select {
		case v, ok = <-s.src.Out():
		default:
			if err := out.Flush(ctx); err != nil {
				return err
			}
			select {
			case v, ok = <-s.src.Out():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok {
			return nil
		}
		val, isT := v.(T)
		if !isT {
			var zero T
			return fmt.Errorf("go-streams source emitted %T, want %T", v, zero)
		}
		m := stream.Message[T]{Value: val}
		m.Offset = seq
		m.Timestamp = time.Now()
		seq++
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
}

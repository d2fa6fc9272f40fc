package sink

import (
	"context"

	streams "github.com/reugn/go-streams"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// GoStreams returns a sink that hands each value to a reugn/go-streams sink
// (its connectors: files, writers, stdout, ...). go-streams sinks do not
// acknowledge elements, so a message is settled as completed once the
// go-streams sink has taken it from its input channel: what that sink
// buffers and has not written yet is lost if the process crashes (its
// offsets may be committed already). Where every element must be written,
// use a sink that settles after writing (sink.Func, a Kafka producer).
// When the input ends
// or the pipeline stops, the go-streams sink's input is closed and this
// stage waits for it to complete (AwaitCompletion).
func GoStreams[T any](k streams.Sink) stream.Sink[T] {
	return &goStreamsSink[T]{k: k}
}

type goStreamsSink[T any] struct {
	k streams.Sink
}

func (s *goStreamsSink[T]) Name() string { return "gostreams" }

func (s *goStreamsSink[T]) Validate() error {
	if s.k == nil {
		return &stream.ConfigError{Stage: "gostreams", Argument: "k", Reason: "must not be nil"}
	}
	return nil
}

func (s *goStreamsSink[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	err := s.feed(ctx, in)
	close(s.k.In())
	s.k.AwaitCompletion()
	return err
}

func (s *goStreamsSink[T]) feed(ctx context.Context, in *stream.Inlet[T]) error {
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		for i := range b.Items {
			select {
			case s.k.In() <- b.Items[i].Value:
				in.Settle(&b.Items[i], stream.Completed)
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		return false, nil
	})
}

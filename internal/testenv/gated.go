package testenv

import (
	"context"

	"github.com/sluice-streams/sluice/stream"
)

// GatedSink takes nothing until release is closed (or the pipeline ends),
// then settles every message Completed. Behind a small pipe it holds a
// source's records back: fetched and tracked, not sent.
func GatedSink[T any](release <-chan struct{}) stream.Sink[T] {
	return stream.SinkFunc[T](func(ctx context.Context, in *stream.Inlet[T]) error {
		select {
		case <-release:
		case <-ctx.Done():
			return nil
		}
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
		}
	})
}

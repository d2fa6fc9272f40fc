package testenv

import (
	"context"

	"github.com/sluice-streams/sluice/stream"
)

// GatedSink takes nothing until release is closed (or the pipeline ends),
// then settles every message Completed, after passing it to each if each
// is not nil. Behind a small pipe it holds a source's records back:
// fetched and tracked, not sent.
func GatedSink[T any](release <-chan struct{}, each func(*stream.Message[T])) stream.Sink[T] {
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
				if each != nil {
					each(&b.Items[i])
				}
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
		}
	})
}

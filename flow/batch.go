package flow

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Batch returns a flow that groups consecutive messages into slices of at
// most size values, emitting a group when it is full or when maxWait has
// passed since its first message arrived, whichever comes first; maxWait 0
// means groups are emitted only when full or at the end of the input. The
// group carries the envelope of its first message and a handle that settles
// every message in it (stream.Join).
func Batch[T any](size int, maxWait time.Duration) stream.Flow[T, []T] {
	return &batchFlow[T]{size: size, maxWait: maxWait}
}

type batchFlow[T any] struct {
	size    int
	maxWait time.Duration
}

func (f *batchFlow[T]) Name() string { return "batch" }

func (f *batchFlow[T]) Validate() error {
	if f.size < 1 {
		return &stream.ConfigError{Stage: "batch", Argument: "size", Reason: fmt.Sprintf("must be at least 1, got %d", f.size)}
	}
	if f.maxWait < 0 {
		return &stream.ConfigError{Stage: "batch", Argument: "maxWait", Reason: fmt.Sprintf("must not be negative, got %v", f.maxWait)}
	}
	return nil
}

func (f *batchFlow[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[[]T]) error {
	var (
		vals   []T
		hs     []stream.Handle
		first  stream.Envelope
		timer  *time.Timer
		expiry <-chan time.Time
	)
	emit := func() error {
		if len(vals) == 0 {
			return nil
		}
		m := stream.Message[[]T]{Value: vals, Envelope: first}
		m.SetHandle(stream.Join(hs))
		vals, hs = make([]T, 0, f.size), hs[:0]
		if timer != nil {
			timer.Stop()
			expiry = nil
		}
		if err := out.Send(ctx, m); err != nil {
			return err
		}
		return out.Flush(ctx)
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	vals = make([]T, 0, f.size)
	for {
		select {
		case b, ok := <-in.C():
			if !ok {
				return emit()
			}
			in.Received(b)
			for i := range b.Items {
				m := &b.Items[i]
				if len(vals) == 0 {
					first = m.Envelope
					if f.maxWait > 0 {
						if timer == nil {
							timer = time.NewTimer(f.maxWait)
						} else {
							timer.Reset(f.maxWait)
						}
						expiry = timer.C
					}
				}
				vals = append(vals, m.Value)
				hs = append(hs, m.Handle())
				if len(vals) == f.size {
					if err := emit(); err != nil {
						b.Release()
						return err
					}
				}
			}
			b.Release()
		case <-expiry:
			expiry = nil
			if err := emit(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

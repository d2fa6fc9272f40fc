// Package stage holds the loops that flows and sinks share: receiving
// batches until the end of input and calling per-message code with panics
// turned into message failures.
package stage

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Each calls fn for every message of items. A panic in fn fails the message
// it was handling (with a *stream.PanicError) and the loop goes on with the
// next one. Recovering once per panic, rather than deferring per message,
// keeps the common path free of defer cost.
func Each[T any](ctx context.Context, in *stream.Inlet[T], items []stream.Message[T], fn func(m *stream.Message[T]) error) error {
	for i := 0; i < len(items); {
		next, err := eachFrom(ctx, in, items, i, fn)
		if err != nil {
			return err
		}
		i = next
	}
	return nil
}

func eachFrom[T any](ctx context.Context, in *stream.Inlet[T], items []stream.Message[T], start int,
	fn func(m *stream.Message[T]) error) (next int, err error) {
	i := start
	defer func() {
		if r := recover(); r != nil {
			next = i + 1
			err = in.Fail(ctx, items[i], stream.NewPanicError(r))
		}
	}()
	for ; i < len(items); i++ {
		if err := fn(&items[i]); err != nil {
			return i + 1, err
		}
	}
	return i, nil
}

// Loop receives batches until the input ends, hands each to fn and then
// recycles it, unless fn returns keep == true because it passed the batch on.
// It returns nil at the end of the input.
func Loop[T any](ctx context.Context, in *stream.Inlet[T], fn func(b *stream.Batch[T]) (kept bool, err error)) error {
	for {
		b, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		kept, err := fn(b)
		if !kept {
			b.Release()
		}
		if err != nil {
			return err
		}
	}
}

// ForEach is Loop with Each: fn is called for every message received.
func ForEach[T any](ctx context.Context, in *stream.Inlet[T], fn func(m *stream.Message[T]) error) error {
	return Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		return false, Each(ctx, in, b.Items, fn)
	})
}

// NilArg is the configuration error for a required argument left nil.
func NilArg(stage, arg string) error {
	return &stream.ConfigError{Stage: stage, Argument: arg, Reason: "must not be nil"}
}

// Sleep waits d, or until ctx ends, and then returns ctx's error (nil
// if d passed).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

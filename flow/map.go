package flow

import (
	"context"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Map returns a flow that applies fn to each message's value and emits the
// result with the message's envelope. An error from fn fails that message;
// stream.Fatal(err) ends the pipeline.
func Map[In, Out any](fn func(In) (Out, error)) stream.Flow[In, Out] {
	return &mapFlow[In, Out]{fn: fn}
}

type mapFlow[In, Out any] struct {
	fn func(In) (Out, error)
}

func (f *mapFlow[In, Out]) Name() string { return "map" }

func (f *mapFlow[In, Out]) Validate() error {
	if f.fn == nil {
		return stage.NilArg("map", "fn")
	}
	return nil
}

func (f *mapFlow[In, Out]) Run(ctx context.Context, in *stream.Inlet[In], out *stream.Outlet[Out]) error {
	return stage.Loop(ctx, in, func(b *stream.Batch[In]) (bool, error) {
		items := b.Items
		for i := 0; i < len(items); {
			dst, err := out.Free(ctx)
			if err != nil {
				return false, err
			}
			next, k, err := f.fill(ctx, in, items, i, dst)
			if xerr := out.Extend(ctx, k); err == nil {
				err = xerr
			}
			if err != nil {
				return false, err
			}
			i = next
		}
		return false, nil
	})
}

// fill maps items[i:] into dst until either runs out. A panic in fn fails
// the message that caused it and fill returns just past it.
func (f *mapFlow[In, Out]) fill(ctx context.Context, in *stream.Inlet[In], items []stream.Message[In], i int,
	dst []stream.Message[Out]) (next, k int, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = i+1, in.Fail(ctx, items[i], stream.NewPanicError(r))
		}
	}()
	for ; i < len(items) && k < len(dst); i++ {
		v, ferr := f.fn(items[i].Value)
		if ferr != nil {
			if err := in.Fail(ctx, items[i], ferr); err != nil {
				return i + 1, k, err
			}
			continue
		}
		d := &dst[k]
		d.Value = v
		d.Envelope = items[i].Envelope
		k++
	}
	return i, k, nil
}

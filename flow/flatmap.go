package flow

import (
	"context"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// FlatMap returns a flow that turns each message into zero or more. The
// input is settled when all its outputs are (stream.Fanout); an empty result
// settles it as stream.Filtered at once.
func FlatMap[In, Out any](fn func(In) ([]Out, error)) stream.Flow[In, Out] {
	return &flatMapFlow[In, Out]{fn: fn}
}

type flatMapFlow[In, Out any] struct {
	fn func(In) ([]Out, error)
}

func (f *flatMapFlow[In, Out]) Name() string { return "flat-map" }

func (f *flatMapFlow[In, Out]) Validate() error {
	if f.fn == nil {
		return stage.NilArg("flat-map", "fn")
	}
	return nil
}

func (f *flatMapFlow[In, Out]) Run(ctx context.Context, in *stream.Inlet[In], out *stream.Outlet[Out]) error {
	return stage.ForEach(ctx, in, func(m *stream.Message[In]) error {
		vs, err := f.fn(m.Value)
		if err != nil {
			return in.Fail(ctx, *m, err)
		}
		if len(vs) == 0 {
			in.Settle(m, stream.Filtered)
			return nil
		}
		h := stream.Fanout(m.Handle(), len(vs))
		for _, v := range vs {
			o := out.Slot()
			*o = stream.WithValue(*m, v)
			o.SetHandle(h)
			if err := out.SendSlot(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

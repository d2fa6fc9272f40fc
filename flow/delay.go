package flow

import (
	"context"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Delay holds each message until due returns a time that has passed, then
// passes it on. Messages keep their order: one due later holds back those
// behind it, so use it on a stream ordered by due time, such as a parking
// topic replayed with sink/kafka.ReplayAt. A zero time is due at once.
// While it waits the stage reads nothing more, so its source slows down;
// the messages it holds are unsettled, so a crash replays them. When the
// pipeline is asked to stop, Delay stops waiting: messages already due go
// on, the others stay unsettled (replayed later) and do not hold up the
// drain. A panic in due fails that message.
func Delay[T any](due func(e *stream.Envelope) time.Time) stream.Flow[T, T] {
	return &delayFlow[T]{due: due}
}

type delayFlow[T any] struct {
	due func(e *stream.Envelope) time.Time
}

func (f *delayFlow[T]) Name() string { return "delay" }

func (f *delayFlow[T]) Validate() error {
	if f.due == nil {
		return stage.NilArg("delay", "due")
	}
	return nil
}

func (f *delayFlow[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	draining := false
	// stage.Each fails a message whose due panics, and goes on.
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		return false, stage.Each(ctx, in, b.Items, func(m *stream.Message[T]) error {
			if wait := time.Until(f.due(&m.Envelope)); wait > 0 {
				if draining {
					return nil // not due: left unsettled, replayed later
				}
				if err := in.FlushOutputs(ctx); err != nil {
					return err
				}
				if t == nil {
					t = time.NewTimer(wait)
				} else {
					t.Reset(wait)
				}
				select {
				case <-t.C:
				case <-in.Draining():
					draining = true
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return out.Send(ctx, *m)
		})
	})
}

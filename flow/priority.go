package flow

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Prioritize returns a flow that sets each message's level of priority
// (Envelope.Priority, 0 the highest) to level(value): a derived
// priority, such as paying customers high and free ones low,
// for a producer that routes by level or a stage that serves by it. A
// level outside [0, levels) fails the message with a reason naming the
// value (it goes to the failure stream, to be dead-lettered: it is never
// taken for high); so does an error from level. A panic in level fails
// just that message.
func Prioritize[T any](levels int, level func(T) (int, error)) stream.Flow[T, T] {
	return &prioritize[T]{levels: levels, level: level}
}

type prioritize[T any] struct {
	levels int
	level  func(T) (int, error)
}

func (f *prioritize[T]) Name() string { return "prioritize" }

func (f *prioritize[T]) Validate() error {
	switch {
	case f.level == nil:
		return stage.NilArg("prioritize", "level")
	case f.levels < 1 || f.levels > 64:
		return &stream.ConfigError{Stage: "prioritize", Argument: "levels", Reason: fmt.Sprintf("need 1 to 64 levels, got %d", f.levels)}
	}
	return nil
}

// ErrPriorityOutOfRange is wrapped by the failure of a message whose level
// is not one of the known levels.
var ErrPriorityOutOfRange = errors.New("sluice: priority out of range")

func (f *prioritize[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	return stage.ForEach(ctx, in, func(m *stream.Message[T]) error {
		l, err := f.level(m.Value)
		if err == nil && (l < 0 || l >= f.levels) {
			err = fmt.Errorf("%w: level %d, want 0 (highest) to %d", ErrPriorityOutOfRange, l, f.levels-1)
		}
		if err != nil {
			return in.Fail(ctx, *m, err)
		}
		m.Priority = uint8(l)
		return out.Send(ctx, *m)
	})
}

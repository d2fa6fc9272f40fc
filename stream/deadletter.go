package stream

import (
	"context"
	"errors"
	"io"
	"log/slog"
)

// logDeadLetter is the dead letter of a pipeline whose failure stream is not
// connected: it records each failure in the log, with its reason and
// position, and settles it as dead-lettered.
type logDeadLetter struct {
	logger *slog.Logger
}

func (d *logDeadLetter) Run(ctx context.Context, in *Inlet[Failure]) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			return endOfInput(err)
		}
		for i := range b.Items {
			m := &b.Items[i]
			d.logger.LogAttrs(ctx, slog.LevelError, "message dead-lettered (default dead letter: connect Graph.Failures to keep it)",
				slog.String("stage", m.Value.Stage),
				slog.String("reason", m.Value.Err.Error()),
				slog.String("topic", m.Topic),

				slog.Int("partition", int(m.Partition)),
				slog.Int64("offset", m.Offset),
				slog.String("key", string(m.Key)),
				slog.Any("value", m.Value.Value))
			in.Settle(m, DeadLettered)
		}
		b.Release()
	}
}

// endOfInput turns io.EOF, the normal end of a stage's input, into nil.
func endOfInput(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

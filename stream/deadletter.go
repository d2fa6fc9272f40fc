package stream

import (
	"context"
	"errors"
	"fmt"
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
			d.record(ctx, &b.Items[i])
			in.Settle(&b.Items[i], DeadLettered)
		}
		b.Release()
	}
}

// record logs one failure. The value and the reason are the user's: if
// printing them panics, the failure is logged without them, never lost
// and never fatal (a dead letter has no failure output of its own).
func (d *logDeadLetter) record(ctx context.Context, m *Message[Failure]) {
	attrs := []slog.Attr{slog.String("stage", m.Value.Stage), slog.String("topic", m.Topic),
		slog.Int("partition", int(m.Partition)), slog.Int64("offset", m.Offset), slog.String("key", string(m.Key))}
	defer func() {
		if r := recover(); r != nil {
			d.logger.LogAttrs(ctx, slog.LevelError, deadLetterMsg, append(attrs,
				slog.String("reason", fmt.Sprintf("(could not be printed: panic: %v)", r)))...)
		}
	}()
	reason := "unknown (the failure carries no error)"
	if m.Value.Err != nil {
		reason = m.Value.Err.Error()
	}
	d.logger.LogAttrs(ctx, slog.LevelError, deadLetterMsg, append(attrs, slog.String("reason", reason),
		slog.String("value", fmt.Sprintf("%+v", m.Value.Value)))...)
}

const deadLetterMsg = "message dead-lettered (default dead letter: connect Graph.Failures to keep it)"

// endOfInput turns io.EOF, the normal end of a stage's input, into nil.
func endOfInput(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

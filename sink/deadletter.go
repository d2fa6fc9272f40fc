package sink

import (
	"context"
	"fmt"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// DeadLetter is a sink for a pipeline's failures (stream.Graph.Failures):
// it records each failed message with its reason somewhere durable and then
// settles it as stream.DeadLettered. If it cannot record a failure it must
// end the pipeline rather than settle it, so the message is replayed.
// DeadLetterFunc, sink/kafka.NewDeadLetter and, for tests, Collect[stream.Failure]
// are DeadLetters.
type DeadLetter = stream.Sink[stream.Failure]

// DeadLetterFunc returns a dead letter that calls record for each failure
// and settles it as dead-lettered when record returns nil. An error from
// record ends the pipeline with the message unsettled.
func DeadLetterFunc(record func(ctx context.Context, m stream.Message[stream.Failure]) error) DeadLetter {
	return &deadLetterFunc{record: record}
}

type deadLetterFunc struct {
	record func(ctx context.Context, m stream.Message[stream.Failure]) error
}

func (d *deadLetterFunc) Name() string { return "dead-letter" }

func (d *deadLetterFunc) Validate() error {
	if d.record == nil {
		return &stream.ConfigError{Stage: "dead-letter", Argument: "record", Reason: "must not be nil"}
	}
	return nil
}

func (d *deadLetterFunc) Run(ctx context.Context, in *stream.Inlet[stream.Failure]) error {
	return stage.ForEach(ctx, in, func(m *stream.Message[stream.Failure]) error {
		if err := d.record(ctx, *m); err != nil {
			return fmt.Errorf("recording failure of stage %q: %w", m.Value.Stage, err)
		}
		in.Settle(m, stream.DeadLettered)
		return nil
	})
}

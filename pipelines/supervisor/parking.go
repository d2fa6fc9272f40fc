package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// HeaderParkings counts the times a compensation was parked: 1 on its
// first parked record, and one more each time its replay fails again and
// it is parked again. A dead letter of a compensation that was parked
// carries it too.
const HeaderParkings = "sluice-parkings"

// ErrOutOfParkings is wrapped by the reason of a compensation
// dead-lettered because it failed transiently again after it was parked
// Config.MaxParkings times.
var ErrOutOfParkings = errors.New("compensation out of parkings")

// parkedHeaders are the headers a parking adds to a record: a replayed
// compensation drops them before it is parked again or dead-lettered, so
// that its record has one set, describing its latest failure. The
// shrinking headers (kafkasink.HeaderTruncated, ...) stay: they describe
// the value, which is still the shrunk one.
var parkedHeaders = []string{kafkasink.HeaderStage, kafkasink.HeaderReason, kafkasink.HeaderAttempt,
	kafkasink.HeaderFailedAt, kafkasink.HeaderTopic, kafkasink.HeaderPartition, kafkasink.HeaderOffset,
	kafkasink.HeaderFirstFailure, kafkasink.HeaderReplayAt, HeaderParkings}

// triage readies each failed compensation for the parking or the dead
// letter (the stage after it splits them on Failure.Transient):
//
//   - the value becomes the event's bytes as they came;
//   - a compensation replayed from the retry topic gets back what its
//     earlier parkings recorded — its position on the failures topic, its
//     first failure time and its count of parkings — and drops their
//     headers;
//   - a transient failure counts one more parking, unless the count has
//     reached maxParkings: then it is permanent, wrapping ErrOutOfParkings;
//   - parkings are logged as warnings, dead letters as errors.
type triage struct {
	retryTopic  string
	maxParkings int
	log         *slog.Logger
}

func (t *triage) Name() string { return "triage" }

func (t *triage) Run(ctx context.Context, in *stream.Inlet[stream.Failure], out *stream.Outlet[stream.Failure]) error {
	for {
		b, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range b.Items {
			m := b.Items[i]
			t.ready(ctx, &m)
			if err := out.Send(ctx, m); err != nil {
				b.Release()
				return err
			}
		}
		b.Release()
	}
}

func (t *triage) ready(ctx context.Context, m *stream.Message[stream.Failure]) {
	f := &m.Value
	id := string(m.Key)
	if ev, ok := f.Value.(event); ok {
		id, f.Value = ev.Progress.Request.ID, ev.raw
	}
	parked := 0
	if m.Topic == t.retryTopic {
		parked = t.restore(m)
	} else {
		// An event that came with such headers of its own (one an operator
		// produced back from a dead letter with its headers, say) is not
		// parked yet: they describe nothing of this compensation.
		m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h stream.Header) bool {
			return slices.Contains(parkedHeaders, h.Key)
		})
	}
	if f.Transient && parked >= t.maxParkings {
		f.Transient = false
		f.Err = fmt.Errorf("%w: parked %d times, failed again: %w", ErrOutOfParkings, parked, f.Err)
	}
	if f.Transient {
		parked++
	}
	if parked > 0 {
		m.Headers = append(m.Headers, stream.Header{Key: HeaderParkings, Value: strconv.AppendInt(nil, int64(parked), 10)})
	}
	attrs := []slog.Attr{slog.String("request", id), slog.String("stage", f.Stage), slog.String("reason", fmt.Sprint(f.Err)),
		slog.Int("parkings", parked), slog.String("topic", m.Topic), slog.Int("partition", int(m.Partition)), slog.Int64("offset", m.Offset)}
	if f.Transient {
		t.log.LogAttrs(ctx, slog.LevelWarn, "compensation failed for now: parking it for a later replay", attrs...)
	} else {
		t.log.LogAttrs(ctx, slog.LevelError, "compensation cannot be done: dead-lettering it for an operator", attrs...)
	}
}

// restore gives a compensation replayed from the retry topic back what its
// parkings recorded, drops their headers and returns how many times it
// was parked. Its position becomes the original one on the failures topic,
// which the parking or dead letter it goes to next records again: the
// replayed record is settled through its handle, not its position.
func (t *triage) restore(m *stream.Message[stream.Failure]) (parked int) {
	parked, _ = strconv.Atoi(string(m.Header(HeaderParkings)))
	if topic := m.Header(kafkasink.HeaderTopic); len(topic) > 0 {
		p, err1 := strconv.ParseInt(string(m.Header(kafkasink.HeaderPartition)), 10, 32)
		o, err2 := strconv.ParseInt(string(m.Header(kafkasink.HeaderOffset)), 10, 64)
		if err1 == nil && err2 == nil {
			m.Topic, m.Partition, m.Offset = string(topic), int32(p), o
		}
	}
	if first, err := time.Parse(time.RFC3339Nano, string(m.Header(kafkasink.HeaderFirstFailure))); err == nil &&
		(m.Value.FirstFailure.IsZero() || first.Before(m.Value.FirstFailure)) {
		m.Value.FirstFailure = first
	}
	m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h stream.Header) bool {
		return slices.Contains(parkedHeaders, h.Key)
	})
	return max(parked, 0)
}

// backoff is the replay delay of a compensation parked for the nth time
// (its HeaderParkings, which triage set): first, doubled for each earlier
// parking, at most most.
func backoff(first, most time.Duration) func(m *stream.Message[stream.Failure]) time.Duration {
	return func(m *stream.Message[stream.Failure]) time.Duration {
		n, _ := strconv.Atoi(string(m.Header(HeaderParkings)))
		d := first
		for i := 1; i < n && d < most; i++ {
			d = min(2*d, most)
		}
		return min(d, most)
	}
}

// stopOnFailure is the failure sink of a supervisor with nowhere to park:
// the first compensation that fails stops the pipeline, unsettled, with a
// fatal error naming the request, the stage and the reason (which names
// the undo that failed).
func stopOnFailure(ctx context.Context, in *stream.Inlet[stream.Failure]) error {
	b, err := in.Recv(ctx)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	m := b.Items[0]
	b.Release()
	id := string(m.Key)
	if ev, ok := m.Value.Value.(event); ok {
		id = ev.Progress.Request.ID
	}
	return stream.Fatal(fmt.Errorf("supervisor: the compensation of request %s failed in stage %s and there is no retry "+
		"topic to park it in (Config.Producer is nil): stopping with its event unsettled: %w", id, m.Value.Stage, m.Value.Err))
}

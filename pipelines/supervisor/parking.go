package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// HeaderParkings counts the times a compensation was parked (the parking
// sink keeps it: kafkasink.HeaderParkings). A dead letter of a
// compensation that was parked carries it too.
const HeaderParkings = kafkasink.HeaderParkings

// ErrOutOfParkings is wrapped by the reason of a compensation
// dead-lettered because it failed transiently again after it was parked
// Config.MaxParkings times.
var ErrOutOfParkings = errors.New("compensation out of parkings")

// triage readies each failed compensation for the parking or the dead
// letter (the stage after it splits them on Failure.Transient):
//
//   - the value becomes the event's bytes as they came;
//   - with maxParkings set, a transient failure of a compensation parked
//     that many times already (kafkasink.Parkings: counted on the records
//     of the retry topic) is permanent, wrapping ErrOutOfParkings;
//   - parkings are logged as warnings, dead letters as errors.
//
// The sinks keep the headers: a parked or dead-lettered replay keeps its
// original position and first failure time, and gets one set of failure
// headers and the count of parkings.
type triage struct {
	retryTopic  string
	maxParkings int
	log         *slog.Logger
}

func (t *triage) Name() string { return "triage" }

func (t *triage) Run(ctx context.Context, in *stream.Inlet[stream.Failure], out *stream.Outlet[stream.Failure]) error {
	return stage.Loop(ctx, in, func(b *stream.Batch[stream.Failure]) (bool, error) {
		for i := range b.Items {
			m := b.Items[i]
			t.ready(ctx, &m)
			if err := out.Send(ctx, m); err != nil {
				return false, err
			}
		}
		return false, nil
	})
}

func (t *triage) ready(ctx context.Context, m *stream.Message[stream.Failure]) {
	f := &m.Value
	id := string(m.Key)
	if ev, ok := f.Value.(event); ok {
		id, f.Value = ev.Progress.Request.ID, ev.raw
		if len(ev.raw) > delivery.MaxEventInput {
			// Parked or dead-lettered with headers of its own, a record
			// near the broker's limit would be cut short there, and its
			// replay could not decode it: it travels in the bounded form
			// (a JSON Compensation), as the scheduler writes such events.
			if b, err := json.Marshal(ev.Compensation); err == nil {
				f.Value = b
				m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h stream.Header) bool { return h.Key == delivery.HeaderProgress })
				m.Headers = append(m.Headers, stream.Header{Key: delivery.HeaderReencoded, Value: strconv.AppendInt(nil, int64(len(ev.raw)), 10)})
			}
		}
	}
	parked := kafkasink.Parkings(&m.Envelope, t.retryTopic)
	if m.Topic != t.retryTopic {
		// A failure event carries the request's position (the requests
		// topic) and parkings; the supervisor's record names the event's
		// own position, so that sending a dead letter back to its topic
		// runs the compensation again, not the request.
		m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h stream.Header) bool {
			return h.Key == kafkasink.HeaderTopic || h.Key == kafkasink.HeaderPartition || h.Key == kafkasink.HeaderOffset ||
				h.Key == kafkasink.HeaderParkings // the scheduler's parkings of the request, not of this compensation
		})
	}
	if f.Transient && t.maxParkings > 0 && parked >= t.maxParkings {
		f.Transient = false
		f.Err = fmt.Errorf("%w: parked %d times, failed again: %w", ErrOutOfParkings, parked, f.Err)
	}
	attrs := []slog.Attr{slog.String("request", id), slog.String("stage", f.Stage), slog.String("reason", fmt.Sprint(f.Err)),
		slog.Int("parked_before", parked), slog.String("topic", m.Topic), slog.Int("partition", int(m.Partition)), slog.Int64("offset", m.Offset)}
	if f.Transient {
		t.log.LogAttrs(ctx, slog.LevelWarn, "compensation failed for now: parking it for a later replay", attrs...)
	} else {
		t.log.LogAttrs(ctx, slog.LevelError, "compensation cannot be done: dead-lettering it for an operator", attrs...)
	}
}

// MaxParkedRecord bounds the record the supervisor parks for a
// compensation too large to park as its event came: the event re-encoded
// as a JSON Compensation (its request at most ~3.4 KiB for the ids and
// owners of at most delivery.MaxIDLen bytes that the scheduler lets
// through, the stage, the drone and the tier kept if of at most 64 bytes,
// the reason cut to 512 bytes), its key (or the request's id, if the key
// is longer), the undo's reason (capped at 4 KiB) and the parking's headers,
// in a record batch of its own. A retry topic whose max.message.bytes is at
// least this can park any compensation of a valid request.
const MaxParkedRecord = 16 << 10

// Bounds of the informational fields of a parked compensation's compact
// form: they tell the owner why, they do not say what to undo.
const (
	maxCompactInfo   = 64
	maxCompactReason = 512
)

// compactEvent is a parked compensation's compact form
// (kafkasink.WithCompact), written when its record as the event came does
// not fit the retry topic: the event re-encoded as a JSON Compensation —
// the form an earlier scheduler wrote, which every supervisor decodes —
// with delivery.HeaderReencoded holding the size of the record it stands
// for. The event's other headers are left out. Undo reads only the
// request's id, so nothing it needs is lost.
func compactEvent(m *stream.Message[stream.Failure]) *kgo.Record {
	raw, ok := m.Value.Value.([]byte)
	if !ok {
		return nil
	}
	c, err := delivery.DecodeCompensation(raw, m.Header)
	if err != nil || c.Progress.Request.ID == "" {
		return nil
	}
	c.Stage, c.Reason = clip(c.Stage, maxCompactInfo), clip(c.Reason, maxCompactReason)
	if len(c.Progress.DroneID) > maxCompactInfo {
		c.Progress.DroneID = ""
	}
	if len(c.Progress.Tier) > maxCompactInfo {
		c.Progress.Tier = ""
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	key := m.Key
	if len(key) > delivery.MaxIDLen {
		key = []byte(c.Progress.Request.ID)
	}
	size := len(raw) + len(m.Key)
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
	}
	return &kgo.Record{Key: key, Value: b, Headers: []kgo.RecordHeader{
		{Key: delivery.HeaderReencoded, Value: strconv.AppendInt(nil, int64(size), 10)}}}
}

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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

package kafka

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// Header names the dead letter adds to each record it writes.
const (
	HeaderStage     = "sluice-stage"
	HeaderReason    = "sluice-reason"
	HeaderAttempt   = "sluice-attempt"
	HeaderFailedAt  = "sluice-failed-at"
	HeaderTopic     = "sluice-source-topic"
	HeaderPartition = "sluice-source-partition"
	HeaderOffset    = "sluice-source-offset"
	// HeaderFirstFailure is when the first attempt failed; HeaderReplayAt
	// when a parked message is due for replay (both RFC 3339).
	HeaderFirstFailure = "sluice-first-failure"
	HeaderReplayAt     = "sluice-replay-at"
)

// NewDeadLetter returns a dead letter (for stream.Graph.Failures) that
// writes each failed message to topic and settles it as dead-lettered once
// the broker acknowledged the record. The record keeps the original key and
// headers and adds the reason, stage, attempt, failure time and original
// position as headers. Its value is the failed value: as is for []byte and
// string, JSON otherwise.
func NewDeadLetter(cl *kgo.Client, topic string) *Sink[stream.Failure] {
	s := NewSink(cl, failureRecord(topic, 0))
	s.outcome = stream.DeadLettered
	s.name = "kafka-dead-letter"
	return s
}

// NewParking returns a sink for messages whose transient failure outlasted
// their retries (stream.Failure.Transient): it writes each to topic like
// NewDeadLetter does, adds the first failure time and a replay time
// (replayAfter from now) as headers, and settles it as stream.Parked. A
// pipeline reading topic with flow.Delay(ReplayAt) replays them then.
// Route failures with stream.Split on Failure.Transient: transient ones to
// parking, the rest to the failure queue.
func NewParking(cl *kgo.Client, topic string, replayAfter time.Duration) *Sink[stream.Failure] {
	s := NewSink(cl, failureRecord(topic, replayAfter))
	s.outcome = stream.Parked
	s.name = "kafka-parking"
	return s
}

// ReplayAt returns when a parked message is due (its HeaderReplayAt), or
// the zero time if it has none: a flow.Delay key.
func ReplayAt(e *stream.Envelope) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, string(e.Header(HeaderReplayAt)))
	return t
}

func failureRecord(topic string, replayAfter time.Duration) Encoder[stream.Failure] {
	return func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
		f := m.Value
		r := &kgo.Record{Topic: topic, Key: m.Key}
		switch v := f.Value.(type) {
		case []byte:
			r.Value = v
		case string:
			r.Value = []byte(v)
		case nil:
		default:
			b, err := json.Marshal(v)
			if err != nil {
				b = fmt.Appendf(nil, "%+v", v)
			}
			r.Value = b
		}
		for _, h := range m.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		reason := "unknown"
		if f.Err != nil {
			reason = f.Err.Error()
		}
		at := f.At
		if at.IsZero() {
			at = time.Now()
		}
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderStage, Value: []byte(f.Stage)},
			kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason)},
			kgo.RecordHeader{Key: HeaderAttempt, Value: strconv.AppendInt(nil, int64(max(int(m.Attempt), f.Attempts)), 10)},
			kgo.RecordHeader{Key: HeaderFailedAt, Value: at.UTC().AppendFormat(nil, time.RFC3339Nano)},
		)
		if m.Topic != "" {
			r.Headers = append(r.Headers,
				kgo.RecordHeader{Key: HeaderTopic, Value: []byte(m.Topic)},
				kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
				kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, m.Offset, 10)},
			)
		}
		if !f.FirstFailure.IsZero() {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderFirstFailure, Value: f.FirstFailure.UTC().AppendFormat(nil, time.RFC3339Nano)})
		}
		if replayAfter > 0 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderReplayAt, Value: time.Now().Add(replayAfter).UTC().AppendFormat(nil, time.RFC3339Nano)})
		}
		return r, nil
	}
}

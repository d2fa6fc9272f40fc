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
)

// NewDeadLetter returns a dead letter (for stream.Graph.Failures) that
// writes each failed message to topic and settles it as dead-lettered once
// the broker acknowledged the record. The record keeps the original key and
// headers and adds the reason, stage, attempt, failure time and original
// position as headers. Its value is the failed value: as is for []byte and
// string, JSON otherwise.
func NewDeadLetter(cl *kgo.Client, topic string) *Sink[stream.Failure] {
	s := NewSink(cl, func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
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
			kgo.RecordHeader{Key: HeaderAttempt, Value: strconv.AppendInt(nil, int64(m.Attempt), 10)},
			kgo.RecordHeader{Key: HeaderFailedAt, Value: at.UTC().AppendFormat(nil, time.RFC3339Nano)},
		)
		if m.Topic != "" {
			r.Headers = append(r.Headers,
				kgo.RecordHeader{Key: HeaderTopic, Value: []byte(m.Topic)},
				kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
				kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, m.Offset, 10)},
			)
		}
		return r, nil
	})
	s.outcome = stream.DeadLettered
	s.name = "kafka-dead-letter"
	return s
}

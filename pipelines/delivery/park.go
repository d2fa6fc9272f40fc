package delivery

import (
	"strconv"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// MaxParkedRecord bounds the record the scheduler parks for a request too
// large to park as it came (its record close to the broker's limit, which
// the parking's headers would take past it): the request re-encoded from
// the fields the scheduler reads (at most 4 KiB whatever their text, as
// ids and owners have at most MaxIDLen bytes), its key (or its id, if the
// key is longer than MaxIDLen), the failure's reason (capped at 4 KiB) and
// the parking's headers, in a record batch of its own. A park topic whose
// max.message.bytes is at least this can park any valid request.
const MaxParkedRecord = 12 << 10

// compactRequest is a parked request's compact form (kafkasink.WithCompact),
// written when its record as it came does not fit the park topic: the
// request re-encoded as JSON from its known fields, which the replay parses
// as the same request. The sender's other fields and headers are left out;
// HeaderReencoded holds the size of the record it stands for. A value that
// is not a valid request (never parked: it is dead-lettered) has none.
func compactRequest(m *stream.Message[stream.Failure]) *kgo.Record {
	raw, ok := m.Value.Value.([]byte)
	if !ok {
		return nil
	}
	r, err := Parse(raw)
	if err == nil {
		err = r.Validate()
	}
	if err != nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	key := m.Key
	if len(key) > MaxIDLen {
		key = []byte(r.ID) // the request's own partitioning key, as a compensation event's
	}
	size := inputSize(m, &Progress{Raw: raw})
	return &kgo.Record{Key: key, Value: b, Headers: []kgo.RecordHeader{{Key: HeaderReencoded, Value: strconv.AppendInt(nil, int64(size), 10)}}}
}

package kafka

import (
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// Header names a dead letter adds when it is written smaller than the
// failed message (see NewDeadLetter).
const (
	// HeaderTruncated is "true" on a record whose value was cut short.
	HeaderTruncated = "sluice-truncated"
	// HeaderOriginalSize is the length in bytes of the value as it would
	// have been written whole.
	HeaderOriginalSize = "sluice-original-size"
	// HeaderHeadersDropped is on a record written as headers only, without
	// value and without the message's own headers; its value is how many of
	// those were dropped.
	HeaderHeadersDropped = "sluice-headers-dropped"
)

// MaxReasonBytes is the most bytes of the reason a parking, or a dead
// letter written as headers only, keeps (4 KiB).
const MaxReasonBytes = 4 << 10

// maxHeadersOnlyKey is the longest key a dead letter written as headers only
// keeps.
const maxHeadersOnlyKey = 1 << 10

// shrinkFailure is the Shrinker of NewDeadLetter: the record with its
// value cut to half, then the record as headers only, then nothing. A
// value that could not be encoded goes to headers only at once.
func shrinkFailure(topic string) Shrinker[stream.Failure] {
	return func(m *stream.Message[stream.Failure], rec *kgo.Record, step int, _ error) *kgo.Record {
		switch {
		case rec == nil: // the value could not be encoded
			return headersOnly(topic, m, valueSize(m.Value.Value), reason(m.Value.Err))
		case header(rec, HeaderHeadersDropped) != nil: // the smallest there is was refused
			return nil
		case step == 1 && len(rec.Value) > 1:
			return truncated(rec)
		default:
			size := len(rec.Value)
			if v := header(rec, HeaderOriginalSize); v != nil {
				size, _ = strconv.Atoi(string(v))
			}
			return headersOnly(topic, m, size, reason(m.Value.Err))
		}
	}
}

// shrinkParking is the Shrinker of NewParking: the message's compact form,
// if the parking has one, then nothing. Never a record with a value cut
// short: it would be replayed as another message. A value that could not
// be encoded at all, without a compact form, is parked as headers only,
// the encoding error in its reason: the failure is in the data, so
// stopping would only replay it into the same stop at every restart; its
// replay reads an empty value, failed as malformed with those headers.
func shrinkParking(topic string, replayAfter delayFunc, compact Compact) Shrinker[stream.Failure] {
	return func(m *stream.Message[stream.Failure], rec *kgo.Record, step int, err error) *kgo.Record {
		if step > 1 { // the compact form or the headers were refused too
			return nil
		}
		if compact != nil {
			if c := compact(m); c != nil {
				return compactRecord(topic, m, c, replayAfter)
			}
		}
		if rec == nil { // the value could not be encoded
			return headersOnly(topic, m, valueSize(m.Value.Value),
				reason(m.Value.Err)+"; not parked whole, its value could not be encoded: "+reason(err))
		}
		return nil
	}
}

// compactRecord is the parked record of m in the compact form c: c's key,
// value and headers, with the parking's headers in place of any c has, and
// the original position and first failure time m keeps from an earlier
// parking.
func compactRecord(topic string, m *stream.Message[stream.Failure], c *kgo.Record, replayAfter delayFunc) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: c.Key, Value: c.Value}
	r.Headers = make([]kgo.RecordHeader, 0, len(c.Headers)+12)
	for _, h := range c.Headers {
		if !replacedHeader(h.Key) && !historyHeader(h.Key) && h.Key != HeaderParkings {
			r.Headers = append(r.Headers, h)
		}
	}
	for _, h := range m.Headers {
		if historyHeader(h.Key) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	r.Headers = failureHeaders(r.Headers, m, capReason(reason(m.Value.Err)), topic, replayAfter)
	return r
}

// historyHeader reports whether a header is one of a failed message's
// history that its failure records keep: where it was first read, when it
// first failed.
func historyHeader(key string) bool {
	switch key {
	case HeaderTopic, HeaderPartition, HeaderOffset, HeaderFirstFailure:
		return true
	}
	return false
}

// truncated is rec with the first half of its value, marked as truncated.
func truncated(rec *kgo.Record) *kgo.Record {
	n := len(rec.Value)
	r := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value[: n/2 : n/2]}
	r.Headers = make([]kgo.RecordHeader, 0, len(rec.Headers)+2)
	r.Headers = append(r.Headers, rec.Headers...)
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: HeaderTruncated, Value: []byte("true")},
		kgo.RecordHeader{Key: HeaderOriginalSize, Value: strconv.AppendInt(nil, int64(n), 10)})
	return r
}

// headersOnly is the smallest dead letter of m: the failure's headers with
// the reason why capped, the key if short, and what was left out. size is
// the original value's length, or -1 if unknown.
func headersOnly(topic string, m *stream.Message[stream.Failure], size int, why string) *kgo.Record {
	r := &kgo.Record{Topic: topic}
	if len(m.Key) <= maxHeadersOnlyKey {
		r.Key = m.Key
	}
	r.Headers = make([]kgo.RecordHeader, 0, 16)
	for _, h := range m.Headers { // an earlier parking's record of the original position, first failure and parkings
		if historyHeader(h.Key) || h.Key == HeaderParkings {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	r.Headers = failureHeaders(r.Headers, m, capReason(why), topic, nil)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderHeadersDropped, Value: strconv.AppendInt(nil, int64(len(m.Headers)), 10)})
	if size >= 0 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOriginalSize, Value: strconv.AppendInt(nil, int64(size), 10)})
	}
	return r
}

// capReason cuts s to at most MaxReasonBytes, at a character boundary.
func capReason(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	n := MaxReasonBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// valueSize is the length of a failed value written as is, or -1.
func valueSize(v any) int {
	switch v := v.(type) {
	case []byte:
		return len(v)
	case string:
		return len(v)
	}
	return -1
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

package kafka

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// Headers of a replay (see DeadLetterRecord.Replay): the record sent back
// carries where it came from; a marker written to the dead-letter topic
// says which dead letter was replayed, so that a second replay skips it.
const (
	// HeaderReplayedFrom is on a replayed record: "<dead-letter
	// topic>/<partition>/<offset>".
	HeaderReplayedFrom = "sluice-replayed-from"
	// HeaderReplayed is on a marker record in a dead-letter topic:
	// "<partition>/<offset>" of the dead letter it marks replayed, to
	// HeaderReplayedTo.
	HeaderReplayed   = "sluice-replayed"
	HeaderReplayedTo = "sluice-replayed-to"
)

// failureHeaderKeys are the headers a dead letter or parking adds: a
// replay drops them, keeping the record's own (and a pipeline's state,
// such as the scheduler's sluice-progress).
var failureHeaderKeys = map[string]bool{
	HeaderStage: true, HeaderReason: true, HeaderAttempt: true, HeaderFailedAt: true, HeaderTopic: true,
	HeaderPartition: true, HeaderOffset: true, HeaderFirstFailure: true, HeaderReplayAt: true, HeaderNotBefore: true, HeaderParkings: true,
	HeaderTruncated: true, HeaderOriginalSize: true, HeaderHeadersDropped: true, HeaderReplayedFrom: true,
	// What a Redis Streams source adds to a poison entry it dead-letters:
	// its delivery count and entry ID.
	"sluice-deliveries": true, "sluice-source-id": true,
}

// DeadLetterRecord is a record of a dead-letter topic read back: the
// failed message as it came and what its headers say about the failure.
type DeadLetterRecord struct {
	Record *kgo.Record
	// Stage, Reason, Attempts, FailedAt and FirstFailure describe the
	// (latest) failure; Parkings the times it was parked before.
	Stage, Reason          string
	Attempts, Parkings     int
	FailedAt, FirstFailure time.Time
	// SourceTopic, SourcePartition and SourceOffset are where the message
	// was read when it first failed ("" when the pipeline's source has no
	// positions): where a replay sends it.
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	// Incomplete says why the record does not hold the message as it came
	// (its value was cut, or written as headers only), "" when it does.
	Incomplete string
	// ReplayOf, on a marker record (not a dead letter), is the partition
	// and offset of the dead letter that was replayed.
	ReplayOf string
}

// ReadDeadLetter reads what a dead letter's headers say.
func ReadDeadLetter(r *kgo.Record) DeadLetterRecord {
	d := DeadLetterRecord{Record: r}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderStage:
			d.Stage = v
		case HeaderReason:
			d.Reason = v
		case HeaderAttempt:
			d.Attempts, _ = strconv.Atoi(v)
		case HeaderParkings:
			d.Parkings, _ = strconv.Atoi(v)
		case HeaderFailedAt:
			d.FailedAt, _ = time.Parse(time.RFC3339Nano, v)
		case HeaderFirstFailure:
			d.FirstFailure, _ = time.Parse(time.RFC3339Nano, v)
		case HeaderTopic:
			d.SourceTopic = v
		case HeaderPartition:
			p, _ := strconv.ParseInt(v, 10, 32)
			d.SourcePartition = int32(p)
		case HeaderOffset:
			d.SourceOffset, _ = strconv.ParseInt(v, 10, 64)
		case HeaderTruncated:
			d.Incomplete = "its value was cut short to fit the broker (" + HeaderTruncated + ")"
		case HeaderHeadersDropped:
			d.Incomplete = "it was written as headers only to fit the broker (" + HeaderHeadersDropped + ")"
		case HeaderReplayed:
			d.ReplayOf = v
		}
	}
	if d.FailedAt.IsZero() {
		d.FailedAt = r.Timestamp
	}
	return d
}

// Position is the dead letter's own "<partition>/<offset>".
func (d DeadLetterRecord) Position() string {
	return fmt.Sprintf("%d/%d", d.Record.Partition, d.Record.Offset)
}

// ReasonClass is the reason up to its first ": " — "malformed delivery
// request", "invalid delivery request" — with every word that holds a
// digit (an id: "undoing create_delivery of d-00000002") as "*", to count
// dead letters by.
func (d DeadLetterRecord) ReasonClass() string {
	c, _, _ := strings.Cut(d.Reason, ": ")
	c, _, _ = strings.Cut(c, "\n")
	return idWord.ReplaceAllString(c, "*")
}

var idWord = regexp.MustCompile(`[^\s]*[0-9][^\s]*`)

// Replay returns the record that sends the message back: to topic, or to
// its SourceTopic when topic is "", with its key, value and headers as it
// came (the failure's headers dropped, HeaderReplayedFrom added). A dead
// letter that does not hold the message as it came, or names no topic,
// is an error saying why.
func (d DeadLetterRecord) Replay(topic string) (*kgo.Record, error) {
	if d.Incomplete != "" {
		return nil, fmt.Errorf("sluice: dead letter %s is not the message as it came: %s", d.Position(), d.Incomplete)
	}
	if topic == "" {
		topic = d.SourceTopic
	}
	if topic == "" {
		return nil, fmt.Errorf("sluice: dead letter %s names no original topic (%s): say where to send it", d.Position(), HeaderTopic)
	}
	r := &kgo.Record{Topic: topic, Key: d.Record.Key, Value: d.Record.Value}
	for _, h := range d.Record.Headers {
		if !failureHeaderKeys[h.Key] {
			r.Headers = append(r.Headers, h)
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderReplayedFrom,
		Value: fmt.Appendf(nil, "%s/%d/%d", d.Record.Topic, d.Record.Partition, d.Record.Offset)})
	return r, nil
}

// ReplayMarker returns the record that marks d replayed to topic, for its
// own dead-letter topic: the same key, a short value (not a tombstone on
// a compacted topic).
func (d DeadLetterRecord) ReplayMarker(topic string) *kgo.Record {
	return &kgo.Record{Topic: d.Record.Topic, Key: d.Record.Key, Value: []byte("replayed"), Headers: []kgo.RecordHeader{
		{Key: HeaderReplayed, Value: []byte(d.Position())}, {Key: HeaderReplayedTo, Value: []byte(topic)}}}
}

// WithoutFailureHeaders returns hs without the headers a dead letter or
// parking writes (position, failure times, parkings, shrinking) and the
// names in also. A pipeline calls it on messages read from anywhere but
// its own park topic: there such headers are not its own — a producer
// wrote them, or a failure event was sent back — and the sinks would keep
// them as the message's original position and history (a dead letter
// naming another topic would be replayed there).
func WithoutFailureHeaders(hs []stream.Header, also ...string) []stream.Header {
	drop := func(h stream.Header) bool {
		return (failureHeaderKeys[h.Key] && h.Key != HeaderReplayedFrom) || slices.Contains(also, h.Key)
	}
	if !slices.ContainsFunc(hs, drop) {
		return hs
	}
	return slices.DeleteFunc(slices.Clone(hs), drop)
}

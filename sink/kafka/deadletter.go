package kafka

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/stage"
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
	// when a parked message is due for replay; HeaderNotBefore the earliest
	// a dependency asked for it to be tried again (stream.Failure.NotBefore:
	// a Retry-After; absent if none asked). All RFC 3339.
	HeaderFirstFailure = "sluice-first-failure"
	HeaderReplayAt     = "sluice-replay-at"
	HeaderNotBefore    = "sluice-not-before"
	// HeaderParkings counts the times a message was parked: 1 on its first
	// parked record, one more each time its replay fails again and it is
	// parked again (a parking sink counts it; see Parkings). A dead letter
	// of a message that was parked keeps it.
	HeaderParkings = "sluice-parkings"
)

// Parkings returns how many times the message was parked before: its
// HeaderParkings if it was read from parkTopic (a replay), 0 otherwise (a
// message from anywhere else is not parked yet, whatever headers it came
// with).
func Parkings(e *stream.Envelope, parkTopic string) int {
	if e.Topic != parkTopic {
		return 0
	}
	n, _ := strconv.Atoi(string(e.Header(HeaderParkings)))
	return max(n, 0)
}

// Backoff is a replay delay for NewParkingFunc: first for a message parked
// the first time, doubled for each parking before (Parkings on parkTopic),
// at most most. A failure a dependency asked to wait (its NotBefore, or
// the Retry-After of its error: a 429's, a 503's) waits exactly that
// instead, 0 to 20% more so that messages told the same time do not come
// back together, at most most: a message throttled for 1 s is replayed
// after 1 to 1.2 s, whether it was parked before or not, not after the
// first delay or the one its parkings doubled to.
func Backoff(parkTopic string, first, most time.Duration) func(m *stream.Message[stream.Failure]) time.Duration {
	return func(m *stream.Message[stream.Failure]) time.Duration {
		if d, ok := askedWait(m.Value); ok {
			return min(d, most)
		}
		d := first
		for range Parkings(&m.Envelope, parkTopic) {
			if d >= most {
				break
			}
			d = min(2*d, most)
		}
		// Any other wait its error asks (a breaker's next probe, a 502's
		// or 503's Retry-After) is a floor: replayed sooner, the message
		// would meet the same refusal and spend a parking.
		if ra := stream.Classify(m.Value.Err).RetryAfter; ra > d {
			d = ra
		}
		return min(d, most)
	}
}

// askedWait is how long a failure waits for the time a dependency asked
// (notBefore), with 0 to 20% more of jitter; ok is false if none asked, or
// that time has passed.
func askedWait(f stream.Failure) (d time.Duration, ok bool) {
	nb := notBefore(f)
	if nb.IsZero() {
		return 0, false
	}
	wait := time.Until(nb)
	if wait <= 0 {
		return 0, false
	}
	return wait + time.Duration(rand.Float64()*0.2*float64(wait)), true
}

// BackoffRestarting is Backoff that waits first again for a message
// whose last parking (its HeaderStage, HeaderFailedAt) came before the
// dependency of that stage recovered: recovered(stage) says when it last
// came back (zero: never), as ReplayDue's does. The parkings a message
// had during an outage were the outage's: once it is over, a failure of
// its own waits the first delay, not the longest the outage left it (with
// one doubling to a minute, the last requests of an outage otherwise
// settled a minute after it). Its next parking doubles from its count
// again. A failure a dependency asked to wait waits that, as with Backoff.
func BackoffRestarting(parkTopic string, first, most time.Duration, recovered func(stage string) time.Time) func(m *stream.Message[stream.Failure]) time.Duration {
	backoff := Backoff(parkTopic, first, most)
	return func(m *stream.Message[stream.Failure]) time.Duration {
		if _, asked := askedWait(m.Value); !asked && m.Topic == parkTopic && recoveredSince(&m.Envelope, recovered) {
			return min(first, most)
		}
		return backoff(m)
	}
}

// NewDeadLetter returns a dead letter (for stream.Graph.Failures) that
// writes each failed message to topic and settles it as dead-lettered once
// the broker acknowledged the record. The record keeps the original key and
// headers and adds the reason, stage, attempt, failure time and original
// position as headers. Its value is the failed value: as is for []byte and
// string, JSON otherwise. A message replayed from a parking topic (and
// failed again) gets one set of those headers: its original position and
// first failure time are kept from its parking, the rest describe the
// latest failure.
//
// A dead letter is on the failure path: a message it could not write would
// stop the pipeline, be replayed after a restart and stop it again. So a
// record the client or the broker refuses for a reason of its own (too
// large: a value near the broker's message.max.bytes plus the failure's
// headers) is written smaller instead, first with its value cut to half
// (HeaderTruncated, HeaderOriginalSize), then, if that is refused too, as
// headers only: no value, none of the original headers
// (HeaderHeadersDropped), the reason cut to MaxReasonBytes and the key kept
// if it has at most 1 KiB. A value that cannot be encoded (its MarshalJSON
// fails or panics) is written as headers only at once. Only when the
// broker refuses even that, or the broker or the topic fails, does the
// pipeline stop.
func NewDeadLetter(cl Producer, topic string) *Sink[stream.Failure] {
	s := NewFailureSink(cl, failureRecord(topic, nil), WithShrinker(shrinkFailure(topic)))
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
//
// A parked record is replayed as the message it holds, so a parking never
// cuts a value short nor writes a message as headers only, as a dead
// letter does: its replay would be another message (half a JSON document,
// or nothing), failed as malformed. Its reason is capped at MaxReasonBytes
// (a service's answer can be as long as it likes). A record the broker
// refuses as too large on its own is written in the message's compact form
// (WithCompact) if the parking has one; otherwise, or if that is refused
// too, the pipeline stops with the message unsettled and an error naming
// the topic, to be replayed from its source once the topic's
// max.message.bytes is raised. A worker checks the topic at start for what
// it will park (see the Compact type). A value that cannot be encoded at
// all (its MarshalJSON fails), without a compact form, is parked as
// headers only with the encoding error in its reason: that failure is in
// the data and would stop the pipeline again at every restart.
func NewParking(cl Producer, topic string, replayAfter time.Duration, opts ...ParkingOption) *Sink[stream.Failure] {
	return NewParkingFunc(cl, topic, func(*stream.Message[stream.Failure]) time.Duration { return replayAfter }, opts...)
}

// NewParkingFunc is NewParking with the replay delay chosen per message:
// replayAfter(m) from now (Backoff grows it with the times a message was
// parked before). A delay of zero or less, or a panic in replayAfter,
// writes no replay time: due at once.
//
// A parking counts the times a message was parked in HeaderParkings:
// Parkings(m, topic)+1, so a pipeline can bound them (see Parkings).
//
// A topic read with flow.Delay(ReplayAt) replays in record order: a
// record due later holds back the records behind it in its partition, so
// with delays that differ the later ones set the pace; with
// flow.AnyOrder each record goes at its own time.
func NewParkingFunc(cl Producer, topic string, replayAfter func(m *stream.Message[stream.Failure]) time.Duration,
	opts ...ParkingOption) *Sink[stream.Failure] {
	var p parking
	for _, o := range opts {
		o(&p)
	}
	s := NewSink(cl, failureRecord(topic, replayAfter), WithShrinker(shrinkParking(topic, replayAfter, p.compact)))
	s.outcome = stream.Parked
	s.name = "kafka-parking"
	if replayAfter == nil {
		s.invalid = stage.NilArg(s.name, "replayAfter")
	}
	return s
}

// ParkingOption configures a parking (NewParking, NewParkingFunc).
type ParkingOption func(*parking)

type parking struct {
	compact Compact
}

// Compact gives a parking the compact form of a message whose parked record
// the broker refuses as too large on its own: a record whose Key, Value and
// Headers its replay reads as the same work (a request re-encoded from the
// fields the pipeline reads, say, without the sender's extra fields and
// headers), and small enough for the topic whatever the message: a worker
// can then check at start that its park topic holds the largest compact
// form. The parking sets the topic and adds its own headers (the failure,
// the replay time, the count of parkings, the original position and first
// failure time kept from an earlier parking), replacing any of those the
// record has. nil: the message has no compact form. It is also asked when
// the message's value could not be encoded (a MarshalJSON that fails).
type Compact func(m *stream.Message[stream.Failure]) *kgo.Record

// WithCompact gives a parking the compact form of the messages it parks,
// for those whose record is too large for the topic (see Compact). Default:
// none; such a message stops the pipeline, unsettled.
func WithCompact(fn Compact) ParkingOption { return func(p *parking) { p.compact = fn } }

// delayFunc is when a failure is due for replay, from now: nil for a dead
// letter, which is not replayed.
type delayFunc func(m *stream.Message[stream.Failure]) time.Duration

// safeAfter is replayAfter(m), or 0 — no replay time, due at once — if
// replayAfter is nil (a dead letter) or panics: a parked record replayed
// early is retried early, while one not written would stop the pipeline.
func safeAfter(replayAfter delayFunc, m *stream.Message[stream.Failure]) (d time.Duration) {
	if replayAfter == nil {
		return 0
	}
	defer func() {
		if recover() != nil {
			d = 0
		}
	}()
	return replayAfter(m)
}

// ReplayAt returns when a parked message is due (its HeaderReplayAt), or
// the zero time if it has none: a flow.Delay key.
func ReplayAt(e *stream.Envelope) time.Time {
	t, _ := headerTime(e, HeaderReplayAt)
	return t
}

// FirstFailure returns when a parked message first failed (its
// HeaderFirstFailure, kept across parkings), or the zero time if it has
// none.
func FirstFailure(e *stream.Envelope) time.Time {
	t, _ := headerTime(e, HeaderFirstFailure)
	return t
}

// recoveredSince reports whether the dependency of the stage a parked
// message failed at (its HeaderStage) has come back since it failed (its
// HeaderFailedAt): recovered(stage) says when it last did (zero: never).
func recoveredSince(e *stream.Envelope, recovered func(stage string) time.Time) bool {
	back := recovered(string(e.Header(HeaderStage)))
	if back.IsZero() {
		return false
	}
	failed, ok := headerTime(e, HeaderFailedAt)
	return ok && back.After(failed)
}

// headerTime reads the time a failure header holds; ok is false if it has
// none, or none that parses.
func headerTime(e *stream.Envelope, key string) (t time.Time, ok bool) {
	t, err := time.Parse(time.RFC3339Nano, string(e.Header(key)))
	return t, err == nil
}

// ReplayDue is a flow.Delay key for a parking topic that replays a
// parked message at once, rather than at its ReplayAt, when the
// dependency of the stage it failed at (its HeaderStage) has recovered
// since it was parked (its HeaderFailedAt): recovered(stage) says when
// that dependency last came back (zero: never), as a
// backpressure.Recovery's At does for the breaker guarding the stage.
// A message a dependency asked to wait (HeaderNotBefore: a Retry-After) is
// never brought before that: a throttling service whose breaker closes on
// one call it let through has not asked the others back. Use it with
// flow.Recheck on the Recovery's C, so that messages already held are
// brought forward too. A message without those headers is due at its
// ReplayAt.
func ReplayDue(recovered func(stage string) time.Time) func(e *stream.Envelope) time.Time {
	return func(e *stream.Envelope) time.Time {
		at := ReplayAt(e)
		if at.IsZero() {
			return at
		}
		if !recoveredSince(e, recovered) {
			return at
		}
		if nb, ok := headerTime(e, HeaderNotBefore); ok && nb.Before(at) {
			return nb
		}
		if e.Header(HeaderNotBefore) != nil {
			return at // asked to wait at least until its replay time
		}
		return time.Time{}
	}
}

// notBefore is the earliest time a failure may be tried again: its
// NotBefore, or the end of the Retry-After of its last error if that is a
// throttling answer (a failure not from an async stage's retries).
func notBefore(f stream.Failure) time.Time {
	nb := f.NotBefore
	if c := stream.Classify(f.Err); c.Reason == stream.ReasonThrottled && c.RetryAfter > 0 {
		at := f.At
		if at.IsZero() {
			at = time.Now()
		}
		if end := at.Add(c.RetryAfter); end.After(nb) {
			nb = end
		}
	}
	return nb
}

// FailureRecord is the record a dead letter writes for m, with value as
// its value and reason as its reason: the failed message's key and
// headers, and the headers of the failure (stage, reason, attempt, failure
// times, original position). A pipeline whose failure event must carry the
// input as it came, and state of its own beside it (in a header it adds),
// builds its records with it.
func FailureRecord(topic string, m *stream.Message[stream.Failure], value []byte, reason string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: m.Key, Value: value}
	r.Headers = failureHeaders(keptHeaders(m, false), m, reason, topic, nil)
	return r
}

// keptHeaders are the failed message's headers that its failure record
// keeps (see replacedHeader); a parking counts its parkings anew.
func keptHeaders(m *stream.Message[stream.Failure], parking bool) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(m.Headers)+10)
	for _, h := range m.Headers {
		if !replacedHeader(h.Key) && !(parking && h.Key == HeaderParkings) {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	return hs
}

func failureRecord(topic string, replayAfter delayFunc) Encoder[stream.Failure] {
	return func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
		r := &kgo.Record{Topic: topic, Key: m.Key}
		switch v := m.Value.Value.(type) {
		case []byte:
			r.Value = v
		case string:
			r.Value = []byte(v)
		case nil:
		default:
			b, err := json.Marshal(v)
			if err != nil {
				// Not the value's Go syntax in its place: a dead letter
				// is then written as headers only and a parking in its
				// compact form (their Shrinkers), as for a MarshalJSON
				// that panics; a replay must not read another message.
				return nil, fmt.Errorf("encoding the failed value: %w", err)
			}
			r.Value = b
		}
		why := reason(m.Value.Err)
		if replayAfter != nil {
			why = capReason(why) // a parking is not shrunk: see NewParking
		}
		r.Headers = failureHeaders(keptHeaders(m, replayAfter != nil), m, why, topic, replayAfter)
		return r, nil
	}
}

// replacedHeader reports whether a header of the failed message is one the
// failure's own replaces. A message replayed from a parking topic carries
// the headers of its parking; parked or dead-lettered again, its record
// has one set, describing the latest failure (ReplayAt would otherwise
// read the old replay time). Its original position and first failure are
// kept instead (see failureHeaders), and so are the shrinking headers,
// which describe the value it still has.
func replacedHeader(key string) bool {
	switch key {
	case HeaderStage, HeaderReason, HeaderAttempt, HeaderFailedAt, HeaderReplayAt, HeaderNotBefore:
		return true
	}
	return false
}

// failureHeaders appends what a dead letter says about the failure of m.
// For a parking (replayAfter not nil, topic its topic) it adds the replay
// time and the count of parkings.
func failureHeaders(hs []kgo.RecordHeader, m *stream.Message[stream.Failure], reason, topic string, replayAfter delayFunc) []kgo.RecordHeader {
	f := m.Value
	at := f.At
	if at.IsZero() {
		at = time.Now()
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderStage, Value: []byte(f.Stage)},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderAttempt, Value: strconv.AppendInt(nil, int64(max(int(m.Attempt), f.Attempts)), 10)},
		kgo.RecordHeader{Key: HeaderFailedAt, Value: at.UTC().AppendFormat(nil, time.RFC3339Nano)},
	)
	if m.Topic != "" && m.Header(HeaderTopic) == nil { // else kept: the original position
		hs = append(hs,
			kgo.RecordHeader{Key: HeaderTopic, Value: []byte(m.Topic)},
			kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(m.Partition), 10)},
			kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, m.Offset, 10)},
		)
	}
	if !f.FirstFailure.IsZero() && m.Header(HeaderFirstFailure) == nil { // else kept: the first of all
		hs = append(hs, kgo.RecordHeader{Key: HeaderFirstFailure, Value: f.FirstFailure.UTC().AppendFormat(nil, time.RFC3339Nano)})
	}
	if nb := notBefore(f); !nb.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderNotBefore, Value: nb.UTC().AppendFormat(nil, time.RFC3339Nano)})
	}
	if replayAfter != nil {
		if d := safeAfter(replayAfter, m); d > 0 {
			hs = append(hs, kgo.RecordHeader{Key: HeaderReplayAt, Value: time.Now().Add(d).UTC().AppendFormat(nil, time.RFC3339Nano)})
		}
		hs = append(hs, kgo.RecordHeader{Key: HeaderParkings, Value: strconv.AppendInt(nil, int64(Parkings(&m.Envelope, topic)+1), 10)})
	}
	return hs
}

// reason is the text of a failure's error. fmt, unlike a direct call of
// Error, turns a panic in that method into text.
func reason(err error) string {
	if err == nil {
		return "unknown"
	}
	return fmt.Sprint(err)
}

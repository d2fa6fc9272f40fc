package delivery

import (
	"errors"
	"fmt"
	"strconv"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A failure event (FailuresTopic) is the request's record as it came —
// value, key and headers unchanged, so that it can be read, and sent back
// to the requests topic, like any request — with the failure's headers
// (kafkasink.FailureRecord: stage, reason, attempts, failure times, the
// request's original position) and the scheduler's own state beside it in
// HeaderProgress: the steps that succeeded, which the supervisor undoes.

// HeaderProgress carries a failure event's steps done, as JSON:
// {"done":["check_account",...],"third_party":true,"tier":"paying","drone_id":"..."}.
// A parked request's record carries its steps done in a header of its
// own (HeaderParkedProgress), never this one.
const HeaderProgress = "sluice-progress"

// HeaderReencoded is on a failure event or a parked request whose record
// was too large to travel as it came, and holds the size of the record it
// stands for. A failure event's value is then a JSON Compensation (the
// request re-encoded from its known fields, which are bounded: see
// MaxEventInput); a parked request's, the request re-encoded as JSON (see
// MaxParkedRecord), which its replay reads as any request.
const HeaderReencoded = "sluice-reencoded"

// MaxEventInput bounds the request record (value, key and headers) that a
// failure event carries as it came: a delivery request is a few hundred
// bytes, and an event near the broker's limit would stop the scheduler
// (its failure sink cannot fail) or, grown by the supervisor's parking
// headers, be cut short there and lose its compensation.
const MaxEventInput = 64 << 10

// MaxEventRecord bounds the record of a failure event: the request as it
// came (MaxEventInput at most) and its failure's headers, the reason (4
// KiB of text at most, in two headers, JSON-escaped in one of them) among
// them. The failures topic must hold it: the event's sink has nothing
// smaller to write, and an event refused would stop the scheduler.
const MaxEventRecord = MaxEventInput + 32<<10

// headerOverhead bounds what a header adds to a record beyond its key and
// value (two varint lengths).
const headerOverhead = 10

// stepsDone is Progress without the request (the event's value), with the
// stage and reason of the failure: the supervisor's parkings replace the
// failure headers with their own, and the owner's notification must still
// say why the request failed.
type stepsDone struct {
	Done       []Step `json:"done"`
	ThirdParty bool   `json:"third_party,omitempty"`
	Tier       Tier   `json:"tier,omitempty"`
	DroneID    string `json:"drone_id,omitempty"`
	Stage      string `json:"stage,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// compensationRecord encodes a request that failed for good as the event
// the supervisor acts on. The reason is capped: an error's text (a
// service's answer) can be as large as the service likes, and an event too
// large to write would stop the scheduler.
func compensationRecord(topic string) kafkasink.Encoder[stream.Failure] {
	return func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
		p := m.Value.Value.(*Progress)
		reason := capReason(fmt.Sprint(m.Value.Err))
		if size := inputSize(m, p); size > MaxEventInput {
			b, err := json.Marshal(Compensation{Progress: *p, Stage: m.Value.Stage, Reason: reason})
			if err != nil {
				return nil, err
			}
			bare := *m
			bare.Headers = nil
			r := kafkasink.FailureRecord(topic, &bare, b, reason)
			r.Key = []byte(p.Request.ID)
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderReencoded, Value: strconv.AppendInt(nil, int64(size), 10)},
				kgo.RecordHeader{Key: HeaderCause, Value: []byte(causeOf(m.Value))})
			return r, nil
		}
		state, err := json.Marshal(stepsDone{Done: p.Done, ThirdParty: p.ThirdParty, Tier: p.Tier, DroneID: p.DroneID, Stage: m.Value.Stage, Reason: reason})
		if err != nil {
			return nil, err
		}
		r := kafkasink.FailureRecord(topic, m, p.Raw, reason)
		if len(r.Key) == 0 {
			r.Key = []byte(p.Request.ID) // the supervisor's partitions, and its logs, go by request
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderProgress, Value: state},
			kgo.RecordHeader{Key: HeaderCause, Value: []byte(causeOf(m.Value))})
		return r, nil
	}
}

// HeaderCause says, on a compensation event, why the request is
// compensated, as a word an operator or a verification can count:
// CauseRefused, CauseDeadline, CauseParkings, CauseTransient or
// CauseError.
const HeaderCause = "sluice-cause"

// The causes of a compensation (HeaderCause).
const (
	// CauseRefused: a service refused the request for good (a business
	// refusal: a suspended account, no drone base, a 4xx).
	CauseRefused = "refused"
	// CauseDeadline: its failure was transient, but lasted until it could
	// no longer complete before its deadline (ErrDeadline).
	CauseDeadline = "deadline"
	// CauseParkings: its failure was transient, but outlasted
	// SchedulerConfig.MaxParkings parkings (ErrOutOfParkings).
	CauseParkings = "parkings"
	// CauseTransient: its failure was transient and there was nowhere to
	// park it (no ParkTopic).
	CauseTransient = "transient"
	// CauseError: a failure for good that no service's refusal explains:
	// an answer that could not be read, a backend that panicked, an
	// unexpected status.
	CauseError = "error"
)

// causeOf is the cause of compensating failure f.
func causeOf(f stream.Failure) string {
	switch {
	case errors.Is(f.Err, ErrDeadline):
		return CauseDeadline
	case errors.Is(f.Err, ErrOutOfParkings):
		return CauseParkings
	case f.Transient:
		return CauseTransient
	case refusal(f.Err):
		return CauseRefused
	}
	return CauseError
}

// refusal reports whether err is a service's refusal of the request for
// good: a business error of the services (suspended, no drone base,
// cancelled, rejected), or, over HTTP, a 4xx answer (408 and 429 are not:
// they are transient).
func refusal(err error) bool {
	if errors.Is(err, ErrSuspended) || errors.Is(err, ErrNoDrone) || errors.Is(err, ErrCancelled) || errors.Is(err, ErrRejected) {
		return true
	}
	var hs stream.HTTPStatuser
	if errors.As(err, &hs) {
		code := hs.HTTPStatus()
		return code >= 400 && code < 500 && code != 408 && code != 429
	}
	return false
}

// inputSize is what the request's record adds to its failure event.
func inputSize(m *stream.Message[stream.Failure], p *Progress) int {
	// A header costs its key and value and, in a record batch, a few
	// bytes of lengths besides: a record of half a million empty headers
	// is megabytes, not nothing.
	n := len(p.Raw) + len(m.Key)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value) + headerOverhead
	}
	return n
}

// DecodeEvent reads a failure event from its record (DecodeCompensation
// with the record's headers), as a tool reading the failures topic does.
func DecodeEvent(r *kgo.Record) (Compensation, error) {
	return DecodeCompensation(r.Value, func(key string) []byte {
		for _, h := range r.Headers {
			if h.Key == key {
				return h.Value
			}
		}
		return nil
	})
}

// DecodeCompensation reads a failure event from its value and headers
// (header returns a header's value, nil if absent). An event written by an
// earlier scheduler, a JSON Compensation as its value and no
// HeaderProgress, is read too, so that events on the topic at an upgrade
// are compensated all the same.
func DecodeCompensation(value []byte, header func(key string) []byte) (Compensation, error) {
	var c Compensation
	state := header(HeaderProgress)
	if state == nil {
		if err := json.Unmarshal(value, &c); err != nil {
			return Compensation{}, fmt.Errorf("malformed compensation event: %w", err)
		}
		return c, nil
	}
	r, err := Parse(value)
	if err != nil {
		return Compensation{}, fmt.Errorf("malformed compensation event: its request: %w", err)
	}
	c.Progress = Progress{Request: r, Raw: value}
	c.Stage, c.Reason = string(header(kafkasink.HeaderStage)), string(header(kafkasink.HeaderReason))
	// The steps done only inform: the supervisor undoes every step of
	// the request whatever they say (another copy may have done more).
	// A header that does not decode costs the notification its detail,
	// never the compensation.
	var done stepsDone
	if err := json.Unmarshal(state, &done); err != nil {
		c.Reason = fmt.Sprintf("%s (header %s does not decode: %v)", c.Reason, HeaderProgress, err)
		return c, nil
	}
	c.Progress.Done, c.Progress.ThirdParty, c.Progress.Tier, c.Progress.DroneID = done.Done, done.ThirdParty, done.Tier, done.DroneID
	if done.Stage != "" {
		c.Stage, c.Reason = done.Stage, done.Reason
	}
	return c, nil
}

package delivery

import (
	"fmt"

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
// {"done":["check_account",...],"third_party":true,"drone_id":"..."}.
const HeaderProgress = "sluice-progress"

// stepsDone is Progress without the request (the event's value).
type stepsDone struct {
	Done       []Step `json:"done"`
	ThirdParty bool   `json:"third_party,omitempty"`
	DroneID    string `json:"drone_id,omitempty"`
}

// compensationRecord encodes a request that failed for good as the event
// the supervisor acts on. The reason is capped: an error's text (a
// service's answer) can be as large as the service likes, and an event too
// large to write would stop the scheduler.
func compensationRecord(topic string) kafkasink.Encoder[stream.Failure] {
	return func(m *stream.Message[stream.Failure]) (*kgo.Record, error) {
		p := m.Value.Value.(*Progress)
		state, err := json.Marshal(stepsDone{Done: p.Done, ThirdParty: p.ThirdParty, DroneID: p.DroneID})
		if err != nil {
			return nil, err
		}
		r := kafkasink.FailureRecord(topic, m, p.Raw, capReason(fmt.Sprint(m.Value.Err)))
		if len(r.Key) == 0 {
			r.Key = []byte(p.Request.ID) // the supervisor's partitions, and its logs, go by request
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderProgress, Value: state})
		return r, nil
	}
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
	var done stepsDone
	if err := json.Unmarshal(state, &done); err != nil {
		return Compensation{}, fmt.Errorf("malformed compensation event: header %s: %w", HeaderProgress, err)
	}
	r, err := Parse(value)
	if err != nil {
		return Compensation{}, fmt.Errorf("malformed compensation event: its request: %w", err)
	}
	c.Progress = Progress{Request: r, Done: done.Done, ThirdParty: done.ThirdParty, DroneID: done.DroneID, Raw: value}
	c.Stage, c.Reason = string(header(kafkasink.HeaderStage)), string(header(kafkasink.HeaderReason))
	return c, nil
}

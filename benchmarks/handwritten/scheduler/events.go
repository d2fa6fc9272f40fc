package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers of a failure event, as the sluice scheduler writes them and
// the supervisor and the verification read them.
const (
	headerStage    = "sluice-stage"
	headerReason   = "sluice-reason"
	headerProgress = "sluice-progress"
	headerCause    = "sluice-cause"
)

// maxReason caps the reason an event carries: a service's answer can be
// long.
const maxReason = 2048

// compensate writes the compensation event of a request that failed at
// step for good: the request's record as it came, its steps done and why.
func (w *worker) compensate(rec *kgo.Record, p *progress, step string, cause error) error {
	reason := cause.Error()
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	why := "error"
	switch {
	case refused(cause):
		why = "refused"
	case transient(cause):
		why = "transient"
	}
	state, err := json.Marshal(struct {
		Done       []string `json:"done"`
		ThirdParty bool     `json:"third_party,omitempty"`
		DroneID    string   `json:"drone_id,omitempty"`
		Stage      string   `json:"stage,omitempty"`
		Reason     string   `json:"reason,omitempty"`
	}{p.Done, p.ThirdParty, p.DroneID, step, reason})
	if err != nil {
		return err
	}
	key := rec.Key
	if len(key) == 0 {
		key = []byte(p.Request.ID)
	}
	ev := &kgo.Record{Topic: w.cfg.failures, Key: key, Value: rec.Value, Headers: append(copyHeaders(rec),
		kgo.RecordHeader{Key: headerStage, Value: []byte(step)},
		kgo.RecordHeader{Key: headerReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: headerProgress, Value: state},
		kgo.RecordHeader{Key: headerCause, Value: []byte(why)})}
	if err := w.kcl.ProduceSync(context.Background(), ev).FirstErr(); err != nil {
		return errors.Join(cause, err)
	}
	return nil
}

// deadLetter writes a request that does not parse or validate to the
// dead-letter topic, as it came, with the stage and the reason.
func (w *worker) deadLetter(rec *kgo.Record, stage, reason string) error {
	dl := &kgo.Record{Topic: w.cfg.dead, Key: rec.Key, Value: rec.Value, Headers: append(copyHeaders(rec),
		kgo.RecordHeader{Key: headerStage, Value: []byte(stage)},
		kgo.RecordHeader{Key: headerReason, Value: []byte(reason)})}
	return w.kcl.ProduceSync(context.Background(), dl).FirstErr()
}

// copyHeaders are the request's own headers, which its event keeps.
func copyHeaders(rec *kgo.Record) []kgo.RecordHeader {
	return append(make([]kgo.RecordHeader, 0, len(rec.Headers)+4), rec.Headers...)
}

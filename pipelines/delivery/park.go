package delivery

import (
	"slices"
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
// key is longer than MaxIDLen), the failure's reason (capped at 4 KiB),
// the steps done (maxCarried bytes at most) and the parking's headers, in
// a record batch of its own. A park topic whose
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
	hs := []kgo.RecordHeader{{Key: HeaderReencoded, Value: strconv.AppendInt(nil, int64(size), 10)}}
	if state := m.Header(HeaderParkedProgress); state != nil && len(state) <= maxCarried {
		hs = append(hs, kgo.RecordHeader{Key: HeaderParkedProgress, Value: state}) // the steps done, for the replay to skip
	}
	return &kgo.Record{Key: key, Value: b, Headers: hs}
}

// HeaderParkedProgress carries, on a parked request's record, the steps
// it did before its parking, as JSON ({"done":["check_account",...],
// "third_party":true,"tier":"paying"}), which its replay skips. A key of
// its own, not a failure event's HeaderProgress: a parked request must
// never read as a compensation event (which the supervisor would act
// on), nor an event on the park topic as a parking whose steps are done.
const HeaderParkedProgress = "sluice-parked-progress"

// maxCarried bounds the steps done a parked request carries
// (HeaderParkedProgress): three step names, the third-party flag and the
// owner's tier take about a hundred bytes. A header longer than this is
// not one the scheduler wrote.
const maxCarried = 512

// carryProgress returns hs with p's steps done in HeaderParkedProgress,
// in place of any such header hs had: what a parked request's replay
// skips (resumeProgress). Only the steps before schedule_drone: the drone
// step asks again (its step record, or the drone service, which answers
// with the booking it holds now: one moved since is not delivered with
// the drone it had), and nothing after it can have been done by a
// request that is parked. None if p did no such step.
func carryProgress(hs []stream.Header, p *Progress) []stream.Header {
	hs = slices.DeleteFunc(slices.Clone(hs), func(h stream.Header) bool { return h.Key == HeaderParkedProgress })
	done := p.Done
	if i := slices.Index(done, StepDrone); i >= 0 {
		done = done[:i]
	}
	if len(done) == 0 {
		return hs
	}
	b, err := json.Marshal(stepsDone{Done: done, ThirdParty: p.ThirdParty, Tier: p.Tier})
	if err != nil || len(b) > maxCarried {
		return hs
	}
	return append(hs, stream.Header{Key: HeaderParkedProgress, Value: b})
}

// resumeProgress sets on p the steps done, and what they found, that
// state (a replay's HeaderParkedProgress, as carryProgress wrote it)
// says, and reports whether it did. Only a replay read from the park
// topic is resumed: the scheduler wrote that header there. A header that
// does not decode, is longer than maxCarried, says steps that are not the
// first ones of the workflow in order (an unknown step, one twice, one
// missing before another), names schedule_drone or a drone, or carries a
// failure's stage or reason (a failure event's, not a parking's), is
// ignored: the request is replayed from its first step, which is safe, as
// every step but the recorded ones is idempotent and those look at their
// records.
func resumeProgress(p *Progress, state []byte) bool {
	if len(state) == 0 || len(state) > maxCarried {
		return false
	}
	var done stepsDone
	if err := json.Unmarshal(state, &done); err != nil || len(done.Done) == 0 || len(done.Done) > len(Steps) ||
		done.DroneID != "" || done.Stage != "" || done.Reason != "" {
		return false
	}
	for i, st := range done.Done {
		if st != Steps[i] || st == StepDrone {
			return false
		}
	}
	did := func(st Step) bool { return slices.Contains(done.Done, st) }
	p.Done = append(p.Done[:0], done.Done...)
	if did(StepAccount) {
		p.Tier = done.Tier
	}
	if did(StepThirdParty) {
		p.ThirdParty = done.ThirdParty
	}
	return true
}

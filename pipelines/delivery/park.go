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
	if state := m.Header(HeaderProgress); state != nil && len(state) <= maxCarried {
		hs = append(hs, kgo.RecordHeader{Key: HeaderProgress, Value: state}) // the steps done, for the replay to skip
	}
	return &kgo.Record{Key: key, Value: b, Headers: hs}
}

// maxCarried bounds the steps done a parked request carries
// (HeaderProgress): five step names, the third-party flag, the owner's
// tier and a drone id take a few hundred bytes. Progress that would take
// more (a drone service answering ids of kilobytes) is not carried: its
// replay calls every step again, as a replay without it does, and a
// compact parking stays within MaxParkedRecord.
const maxCarried = 512

// carryProgress returns hs with p's steps done in HeaderProgress, in place
// of any such header hs had: what a parked request's replay skips
// (resumeProgress). None if p did no step, or if they would take more than
// maxCarried bytes.
func carryProgress(hs []stream.Header, p *Progress) []stream.Header {
	hs = slices.DeleteFunc(slices.Clone(hs), func(h stream.Header) bool { return h.Key == HeaderProgress })
	if len(p.Done) == 0 {
		return hs
	}
	b, err := json.Marshal(stepsDone{Done: p.Done, ThirdParty: p.ThirdParty, Tier: p.Tier, DroneID: p.DroneID})
	if err != nil || len(b) > maxCarried {
		return hs
	}
	return append(hs, stream.Header{Key: HeaderProgress, Value: b})
}

// resumeProgress sets on p the steps done, and what they found, that
// state (a replay's HeaderProgress, as carryProgress wrote it) says, and
// reports whether it did. Only a replay read from the park topic is
// resumed: the scheduler wrote that header there. A header that does not
// decode, is longer than maxCarried, or says steps that are not the first
// ones of the workflow in order (an unknown step, one twice, one missing
// before another), or a drone scheduled without its id, is ignored: the
// request is replayed from its first step, which is safe, as every step
// but the recorded ones is idempotent and those look at their records.
func resumeProgress(p *Progress, state []byte) bool {
	if len(state) == 0 || len(state) > maxCarried {
		return false
	}
	var done stepsDone
	if err := json.Unmarshal(state, &done); err != nil || len(done.Done) == 0 || len(done.Done) > len(Steps) {
		return false
	}
	for i, st := range done.Done {
		if st != Steps[i] {
			return false
		}
	}
	did := func(st Step) bool { return slices.Contains(done.Done, st) }
	if did(StepDrone) && done.DroneID == "" {
		return false
	}
	p.Done = append(p.Done[:0], done.Done...)
	if did(StepAccount) {
		p.Tier = done.Tier
	}
	if did(StepThirdParty) {
		p.ThirdParty = done.ThirdParty
	}
	if did(StepDrone) {
		p.DroneID = done.DroneID
	}
	return true
}

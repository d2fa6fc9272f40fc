package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-streams/sluice/stream"
)

// Statuses is a set of HTTP status codes (100 to 599): the ones a
// RetryPolicy takes as transient (TransientStatus). It is a value, so
// policies stay comparable with ==. The zero Statuses is empty.
//
// Its text form (SLUICE_RETRY_<POLICY>_TRANSIENT_STATUS, a flag) is a
// comma-separated list of codes and ranges: "408,429,500-504". Its JSON
// form is a list of codes: [408, 429, 500, 502, 503, 504].
type Statuses struct{ bits [10]uint64 }

// NewStatuses returns the set of codes; a code outside 100..599 is an
// error naming it.
func NewStatuses(codes ...int) (Statuses, error) {
	var s Statuses
	for _, c := range codes {
		if c < 100 || c > 599 {
			return Statuses{}, fmt.Errorf("%d is not an HTTP status (100 to 599)", c)
		}
		s.bits[c/64] |= 1 << (c % 64)
	}
	return s, nil
}

// mustStatuses is NewStatuses for codes known to be valid.
func mustStatuses(codes ...int) Statuses {
	s, err := NewStatuses(codes...)
	if err != nil {
		panic(err)
	}
	return s
}

// DefaultTransientStatus is the TransientStatus of Background and
// Interactive: 408, 429, 500, 502, 503 and 504. A 500 is usually a blip (a
// database failover, a deploy rolled back), worth another attempt for a
// call that may be repeated; take it out for calls that must not be.
func DefaultTransientStatus() Statuses { return mustStatuses(408, 429, 500, 502, 503, 504) }

// Has reports whether code is in the set.
func (s Statuses) Has(code int) bool {
	return code >= 0 && code < 64*len(s.bits) && s.bits[code/64]&(1<<(code%64)) != 0
}

// Empty reports whether the set has no code.
func (s Statuses) Empty() bool { return s == Statuses{} }

// Codes returns the codes in the set, in increasing order.
func (s Statuses) Codes() []int {
	var out []int
	for c := 100; c < 600; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String is the text form, with consecutive codes as ranges.
func (s Statuses) String() string {
	cs := s.Codes()
	var b strings.Builder
	for i := 0; i < len(cs); {
		k := i
		for k+1 < len(cs) && cs[k+1] == cs[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cs[i]))
		if k > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cs[k]))
		}
		i = k + 1
	}
	return b.String()
}

// MarshalText writes the text form.
func (s Statuses) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads the text form: codes and ranges, comma-separated
// ("408,429,500-504"); each bad part is named.
func (s *Statuses) UnmarshalText(b []byte) error {
	var codes []int
	var errs []error
	for _, part := range strings.Split(string(b), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		z := a
		var errZ error
		if isRange {
			z, errZ = strconv.Atoi(strings.TrimSpace(hi))
		}
		switch {
		case errA != nil || errZ != nil:
			errs = append(errs, fmt.Errorf("%q is not an HTTP status or a range of them (like 500-504)", part))
			continue
		case a > z:
			errs = append(errs, fmt.Errorf("%q: the range runs backwards", part))
			continue
		case a < 100 || z > 599:
			// Checked before the range is expanded: a mistyped bound
			// must not cost memory in proportion to it.
			errs = append(errs, fmt.Errorf("%q is not an HTTP status or a range of them (100 to 599)", part))
			continue
		}
		for c := a; c <= z; c++ {
			codes = append(codes, c)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	v, err := NewStatuses(codes...)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalJSON writes the codes as a JSON list.
func (s Statuses) MarshalJSON() ([]byte, error) {
	cs := s.Codes()
	if cs == nil {
		cs = []int{}
	}
	return json.Marshal(cs)
}

// UnmarshalJSON reads a JSON list of codes.
func (s *Statuses) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var cs []int
	if err := json.Unmarshal(b, &cs); err != nil {
		return fmt.Errorf("want a list of HTTP statuses like [429, 500, 503]: %w", err)
	}
	v, err := NewStatuses(cs...)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Classify is stream.Classify with the policy's TransientStatus deciding
// which HTTP statuses are transient (stream.ClassifyStatus); with none
// set, stream.Classify's own (408, 429, 502, 503, 504). A stage with this
// policy (Retry) classifies its failures so, unless Classifier replaces
// it.
func (p *RetryPolicy) Classify(err error) stream.Classification {
	if p.TransientStatus.Empty() {
		return stream.Classify(err)
	}
	return stream.ClassifyStatus(err, p.TransientStatus.Has)
}

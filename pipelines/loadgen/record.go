package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	json "github.com/goccy/go-json"
)

// kindNames are the kinds as a record file writes them.
var kindNames = [...]string{Deliverable: "deliverable", Malformed: "malformed", Invalid: "invalid",
	Suspended: "suspended", Undeliverable: "undeliverable"}

// String returns the kind's name: deliverable, malformed, invalid,
// suspended or undeliverable.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if k < 0 || int(k) >= len(kindNames) {
		return nil, fmt.Errorf("loadgen: no such kind %d", int(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if string(b) == name {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("loadgen: no such kind %q", b)
}

// RecordFormat names the form of a record file in its header.
const RecordFormat = "sluice-loadgen-record"

// recordVersion is the version WriteRecord writes; ReadRecord reads it,
// version 2 (written before the times of the requests were recorded) and
// version 1 (before unconfirmed requests were).
const recordVersion = 3

// recordHeader is a record file's first line.
type recordHeader struct {
	Format      string `json:"format"`
	Version     int    `json:"version"`
	Sent        int64  `json:"sent"`
	Dups        int    `json:"duplicates"`
	Requests    int    `json:"requests"`
	Unconfirmed int    `json:"unconfirmed"`
}

// recordLine is one request of a record file.
type recordLine struct {
	ID          string `json:"id"`
	Kind        Kind   `json:"kind"`
	Unconfirmed bool   `json:"unconfirmed,omitempty"`
	AtMs        int64  `json:"at_ms,omitempty"`
}

// WriteRecord writes what s holds so that ReadRecord can read it back in
// another process (`sluice loadgen -record`, `sluice verify -record`).
// The form is JSON lines: a header, then one line per distinct request,
// by id:
//
//	{"format":"sluice-loadgen-record","version":3,"sent":1012,"duplicates":10,"requests":1002,"unconfirmed":1}
//	{"id":"d-00000000","kind":"deliverable","at_ms":1748772000123}
//	{"id":"d-00000001","kind":"deliverable","unconfirmed":true}
//	{"id":"malformed-17","kind":"malformed","at_ms":1748772000125}
//
// sent counts every record the brokers acknowledged, duplicates included;
// requests is the number of lines of acknowledged requests, unconfirmed
// the number of lines of requests sent and never answered (marked
// "unconfirmed": the brokers may hold them or not). A malformed request
// is recorded under the key it was produced with.
func (s *Sent) WriteRecord(w io.Writer) error {
	s.mu.Lock()
	lines := make([]recordLine, 0, len(s.kinds)+len(s.unconfirmed))
	for id, k := range s.kinds {
		lines = append(lines, recordLine{ID: id, Kind: k, AtMs: s.at[id]})
	}
	for id, k := range s.unconfirmed {
		lines = append(lines, recordLine{ID: id, Kind: k, Unconfirmed: true})
	}
	h := recordHeader{Format: RecordFormat, Version: recordVersion, Sent: s.total.Load(), Dups: s.duplicates,
		Requests: len(s.kinds), Unconfirmed: len(s.unconfirmed)}
	s.mu.Unlock()
	slices.SortFunc(lines, func(a, b recordLine) int { return strings.Compare(a.ID, b.ID) })
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(h); err != nil {
		return err
	}
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadRecord reads what WriteRecord wrote. A record whose header is not
// one, or whose lines are not as many as the header says, is an error.
func ReadRecord(r io.Reader) (*Sent, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 64<<10))
	var h recordHeader
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("loadgen record: header: %w", err)
	}
	if h.Format != RecordFormat || h.Version < 1 || h.Version > recordVersion {
		return nil, fmt.Errorf("loadgen record: header says format %q version %d, want %q version 1 to %d",
			h.Format, h.Version, RecordFormat, recordVersion)
	}
	if h.Sent < 0 || h.Dups < 0 || h.Requests < 0 || h.Unconfirmed < 0 {
		return nil, fmt.Errorf("loadgen record: negative counts in the header %+v", h)
	}
	s := NewSent()
	s.kinds = make(map[string]Kind, min(h.Requests, 10_000_000))
	for n := 1; ; n++ {
		var l struct {
			ID          string `json:"id"`
			Kind        *Kind  `json:"kind"`
			Unconfirmed bool   `json:"unconfirmed"`
			AtMs        int64  `json:"at_ms"`
		}
		if err := dec.Decode(&l); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("loadgen record: request %d: %w", n, err)
		}
		if l.ID == "" || l.Kind == nil {
			return nil, fmt.Errorf("loadgen record: request %d has no id or no kind", n)
		}
		_, dup := s.kinds[l.ID]
		if _, dupU := s.unconfirmed[l.ID]; dup || dupU {
			return nil, fmt.Errorf("loadgen record: request %q twice", l.ID)
		}
		if l.Unconfirmed {
			s.unconfirmed[l.ID] = *l.Kind
		} else {
			s.kinds[l.ID] = *l.Kind
			if l.AtMs > 0 {
				s.at[l.ID] = l.AtMs
			}
		}
	}
	if len(s.kinds) != h.Requests || len(s.unconfirmed) != h.Unconfirmed {
		return nil, fmt.Errorf("loadgen record: %d requests and %d unconfirmed, the header says %d and %d (a file cut short?)",
			len(s.kinds), len(s.unconfirmed), h.Requests, h.Unconfirmed)
	}
	s.duplicates = h.Dups
	s.total.Store(h.Sent)
	return s, nil
}

package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"

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

// recordHeader is a record file's first line.
type recordHeader struct {
	Format   string `json:"format"`
	Version  int    `json:"version"`
	Sent     int64  `json:"sent"`
	Dups     int    `json:"duplicates"`
	Requests int    `json:"requests"`
}

// recordLine is one request of a record file.
type recordLine struct {
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
}

// WriteRecord writes what s holds so that ReadRecord can read it back in
// another process (`sluice loadgen -record`, `sluice verify -record`).
// The form is JSON lines: a header, then one line per distinct request,
// by id:
//
//	{"format":"sluice-loadgen-record","version":1,"sent":1012,"duplicates":10,"requests":1002}
//	{"id":"d-00000000","kind":"deliverable"}
//	{"id":"malformed-17","kind":"malformed"}
//
// sent counts every record produced, duplicates included; requests is
// the number of lines that follow. A malformed request is recorded under
// the key it was produced with.
func (s *Sent) WriteRecord(w io.Writer) error {
	s.mu.Lock()
	lines := make([]recordLine, 0, len(s.kinds))
	for id, k := range s.kinds {
		lines = append(lines, recordLine{id, k})
	}
	h := recordHeader{Format: RecordFormat, Version: 1, Sent: s.total.Load(), Dups: s.duplicates, Requests: len(lines)}
	s.mu.Unlock()
	slices.SortFunc(lines, func(a, b recordLine) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
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
	if h.Format != RecordFormat || h.Version != 1 {
		return nil, fmt.Errorf("loadgen record: header says format %q version %d, want %q version 1", h.Format, h.Version, RecordFormat)
	}
	if h.Sent < 0 || h.Dups < 0 || h.Requests < 0 {
		return nil, fmt.Errorf("loadgen record: negative counts in the header %+v", h)
	}
	s := NewSent()
	s.kinds = make(map[string]Kind, min(h.Requests, 10_000_000))
	for n := 1; ; n++ {
		var l struct {
			ID   string `json:"id"`
			Kind *Kind  `json:"kind"`
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
		if _, dup := s.kinds[l.ID]; dup {
			return nil, fmt.Errorf("loadgen record: request %q twice", l.ID)
		}
		s.kinds[l.ID] = *l.Kind
	}
	if len(s.kinds) != h.Requests {
		return nil, fmt.Errorf("loadgen record: %d requests, the header says %d (a file cut short?)", len(s.kinds), h.Requests)
	}
	s.duplicates = h.Dups
	s.total.Store(h.Sent)
	return s, nil
}

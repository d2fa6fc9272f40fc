package loadgen

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"
)

func sentOf(kinds map[string]Kind, dups int) *Sent {
	s := NewSent()
	maps.Copy(s.kinds, kinds)
	s.duplicates = dups
	s.total.Store(int64(len(kinds) + dups))
	return s
}

// A record written to a file reads back as the same record, in the
// documented form, the requests never answered marked apart and those
// acknowledged with the time they were produced; a record of the first
// version, which had no requests unanswered, and one of the second, which
// had no times, still read.
func TestRecordRoundTrip(t *testing.T) {
	kinds := map[string]Kind{"d-00000002": Deliverable, "d-00000000": Undeliverable, "malformed-1": Malformed,
		"d-00000003": Invalid, "d-00000004": Suspended}
	sent := sentOf(kinds, 3)
	sent.unconfirmed["d-00000005"] = Deliverable
	sent.at["d-00000002"], sent.at["d-00000003"] = 1748772000123, 1748772000125
	var buf bytes.Buffer
	if err := sent.WriteRecord(&buf); err != nil {
		t.Fatal(err)
	}
	want := `{"format":"sluice-loadgen-record","version":3,"sent":8,"duplicates":3,"requests":5,"unconfirmed":1}
{"id":"d-00000000","kind":"undeliverable"}
{"id":"d-00000002","kind":"deliverable","at_ms":1748772000123}
{"id":"d-00000003","kind":"invalid","at_ms":1748772000125}
{"id":"d-00000004","kind":"suspended"}
{"id":"d-00000005","kind":"deliverable","unconfirmed":true}
{"id":"malformed-1","kind":"malformed"}
`
	if buf.String() != want {
		t.Fatalf("record:\n%s\nwant:\n%s", buf.String(), want)
	}
	got, err := ReadRecord(&buf)
	if err != nil {
		t.Fatal(err)
	}
	gotKinds, dups := got.Kinds()
	if !maps.Equal(gotKinds, kinds) || dups != 3 || got.Total() != 8 || got.Distinct() != 5 ||
		!maps.Equal(got.Unconfirmed(), map[string]Kind{"d-00000005": Deliverable}) {
		t.Fatalf("read back %v, %d duplicates, total %d, distinct %d, unconfirmed %v",
			gotKinds, dups, got.Total(), got.Distinct(), got.Unconfirmed())
	}
	if at := got.SentAt("d-00000002"); !at.Equal(time.UnixMilli(1748772000123)) || !got.SentAt("d-00000000").IsZero() {
		t.Fatalf("read back d-00000002 sent at %v, d-00000000 at %v; want %v and never said",
			at, got.SentAt("d-00000000"), time.UnixMilli(1748772000123))
	}

	v1 := `{"format":"sluice-loadgen-record","version":1,"sent":2,"duplicates":0,"requests":2}
{"id":"d-1","kind":"deliverable"}
{"id":"d-2","kind":"invalid"}
`
	if got, err := ReadRecord(strings.NewReader(v1)); err != nil || got.Distinct() != 2 || len(got.Unconfirmed()) != 0 {
		t.Fatalf("a record of version 1: %v", err)
	}
	v2 := `{"format":"sluice-loadgen-record","version":2,"sent":1,"duplicates":0,"requests":1,"unconfirmed":0}
{"id":"d-1","kind":"deliverable"}
`
	if got, err := ReadRecord(strings.NewReader(v2)); err != nil || got.Distinct() != 1 || !got.SentAt("d-1").IsZero() {
		t.Fatalf("a record of version 2: %v", err)
	}

	var empty bytes.Buffer
	if err := NewSent().WriteRecord(&empty); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadRecord(&empty); err != nil || s.Total() != 0 || s.Distinct() != 0 {
		t.Fatalf("an empty record: %v", err)
	}
}

// A file that is not a whole record is refused with what is wrong with it.
func TestRecordRefusesBadFiles(t *testing.T) {
	header := `{"format":"sluice-loadgen-record","version":1,"sent":2,"duplicates":0,"requests":2}` + "\n"
	line := `{"id":"d-1","kind":"deliverable"}` + "\n"
	for in, want := range map[string]string{
		"":                                      "header",
		"[]\n":                                  "header",
		`{"format":"other","version":1}` + "\n": "want",
		`{"format":"sluice-loadgen-record","version":4}` + "\n": "version 4",
		header + line: "cut short",
		header + line + `{"id":"d-1","kind":"deliverable","unconfirmed":true}` + "\n":                                       "twice",
		`{"format":"sluice-loadgen-record","version":2,"sent":1,"duplicates":0,"requests":1,"unconfirmed":1}` + "\n" + line: "cut short",
		header + line + line: "twice",
		header + line + `{"id":"d-2","kind":"lost"}` + "\n": "no such kind",
		header + line + `{"id":"d-2"}` + "\n":               "no kind",
		header + line + `{"id":"d-2","kind":"deliv`:         "request 2",
	} {
		if _, err := ReadRecord(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}

func TestKindNames(t *testing.T) {
	for k := Deliverable; k <= Undeliverable; k++ {
		var back Kind
		if err := back.UnmarshalText([]byte(k.String())); err != nil || back != k {
			t.Errorf("%d: %q read back as %d (%v)", int(k), k, int(back), err)
		}
	}
	if _, err := Kind(9).MarshalText(); err == nil || Kind(9).String() != "Kind(9)" {
		t.Errorf("kind 9: %v %s", err, Kind(9))
	}
}

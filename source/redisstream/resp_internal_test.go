package redisstream

import (
	"errors"
	"strings"
	"testing"
)

// resp joins lines with CRLF, as the server sends them.
func resp(lines ...string) []byte { return []byte(strings.Join(lines, "\r\n") + "\r\n") }

// The same XREADGROUP reply in RESP2 (an array of pairs) and RESP3 (a
// map) parses the same: fields in order, repeats kept, an empty value
// kept, an entry deleted from the stream marked.
func TestParseRead(t *testing.T) {
	entries := []string{
		"*3",
		"*2", "$3", "1-0", "*6", "$5", "value", "$1", "a", "$3", "h:x", "$1", "1", "$3", "h:x", "$1", "2",
		"*2", "$3", "2-0", "*2", "$5", "value", "$0", "",
		"*2", "$3", "3-0", "*-1",
	}
	for name, reply := range map[string][]byte{
		"RESP2": resp(append([]string{"*1", "*2", "$1", "s"}, entries...)...),
		"RESP3": resp(append([]string{"%1", "$1", "s"}, entries...)...),
	} {
		got, err := parseRead(reply)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 || got[0].stream != "s" || len(got[0].entries) != 3 {
			t.Fatalf("%s: %+v", name, got)
		}
		es := got[0].entries
		var fs []string
		for _, f := range es[0].fields {
			fs = append(fs, string(f))
		}
		if es[0].id != "1-0" || strings.Join(fs, " ") != "value a h:x 1 h:x 2" {
			t.Errorf("%s: first entry %s %q", name, es[0].id, fs)
		}
		if len(es[1].fields) != 2 || es[1].fields[1] == nil || len(es[1].fields[1]) != 0 || es[1].deleted {
			t.Errorf("%s: second entry %+v, want an empty value", name, es[1])
		}
		if !es[2].deleted || es[2].fields != nil {
			t.Errorf("%s: third entry %+v, want deleted", name, es[2])
		}
	}
}

// A read that timed out is a null (RESP2 *-1, RESP3 _): no streams.
func TestParseReadTimeout(t *testing.T) {
	for _, reply := range [][]byte{resp("*-1"), resp("_")} {
		got, err := parseRead(reply)
		if err != nil || got != nil {
			t.Errorf("parseRead(%q) = %v, %v; want nothing", reply, got, err)
		}
	}
}

// Error replies become errors go-redis and the source classify as the
// server's; a truncated reply is a protocol error, not a panic.
func TestParseErrors(t *testing.T) {
	_, err := parseRead(resp("-NOGROUP No such key 's' or consumer group 'g'"))
	if !isNoGroup(err) || !isFatal(err) {
		t.Errorf("NOGROUP reply: %v, want a fatal NOGROUP", err)
	}
	_, err = parseRead(resp("!21", "LOADING still loading"))
	if err == nil || isFatal(err) {
		t.Errorf("blob error LOADING: %v, want a transient error", err)
	}
	for _, cut := range []string{"*1\r\n*2\r\n$1\r\ns", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-", "*x\r\n", "\r\n", "!30\r\nLOADING\r\n", "*999999999\r\n*2\r\n"} {
		if _, err := parseRead([]byte(cut)); !errors.Is(err, errProtocol) {
			t.Errorf("parseRead(%q) = %v, want errProtocol", cut, err)
		}
	}
}

// An XAUTOCLAIM reply: the cursor, the entries claimed, and the IDs of
// entries found deleted.
func TestParseAutoClaim(t *testing.T) {
	next, es, deleted, err := parseAutoClaim(resp("*3", "$3", "9-0",
		"*1", "*2", "$3", "5-0", "*2", "$5", "value", "$1", "v",
		"*2", "$3", "6-0", "$3", "7-0"))
	if err != nil || next != "9-0" || len(es) != 1 || es[0].id != "5-0" || deleted != 2 {
		t.Fatalf("parseAutoClaim = %q, %+v, %d, %v", next, es, deleted, err)
	}
}

// A header's number is read as strconv reads it: nulls, negative
// integers, and what is not a number refused.
func TestLength(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		fine bool
	}{
		{"0", 0, true}, {"7", 7, true}, {"256", 256, true}, {"-1", -1, true}, {"-42", -42, true},
		{"+3", 3, true}, {"1234567890123456789", 1234567890123456789, true},
		{"", 0, false}, {"1a", 0, false}, {"-", 0, false}, {" 1", 0, false},
	} {
		n, ok := length([]byte(c.in))
		if ok != c.fine || ok && n != c.n {
			t.Errorf("length(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.fine)
		}
	}
}

package redisstream

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// The source reads the replies of XREADGROUP and XAUTOCLAIM as raw RESP
// (redis.RawCmd) and walks them here: go-redis' parsed stream replies hold
// an entry's fields in a map, which loses their order and repeated
// headers, and its generic reply allocates a string per field. Walking the
// raw reply keeps both, and a message's value is a slice of the reply.

// entry is one stream entry of a reply: its ID and fields (name, value,
// name, value... in the entry's order); deleted reports an entry still
// pending but no longer in the stream (its fields are nil).
type entry struct {
	id      string
	fields  [][]byte
	deleted bool
}

// streamEntries are the entries of one stream in a reply.
type streamEntries struct {
	stream  string
	entries []entry
}

// errProtocol is wrapped when a reply is not what the command returns.
var errProtocol = errors.New("unexpected reply")

// replyError is an error reply of the server ("-NOGROUP ...").
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as a server's reply, as go-redis' own errors are.
func (e replyError) RedisError() {}

type respReader struct {
	b []byte
	i int
}

// header reads a type byte and the number after it, up to CRLF. An error
// reply is returned as a replyError.
func (r *respReader) header() (byte, int, error) {
	if r.i >= len(r.b) {
		return 0, 0, fmt.Errorf("%w: truncated", errProtocol)
	}
	// A header line holds no LF before its CRLF: the first LF ends it.
	end := bytes.IndexByte(r.b[r.i:], '\n')
	if end < 1 || r.b[r.i+end-1] != '\r' {
		return 0, 0, fmt.Errorf("%w: no CRLF", errProtocol)
	}
	end--
	line := r.b[r.i : r.i+end]
	r.i += end + 2
	if len(line) == 0 {
		return 0, 0, fmt.Errorf("%w: an empty line", errProtocol)
	}
	typ := line[0]
	switch typ {
	case '-':
		return typ, 0, replyError(line[1:])
	case '_':
		return typ, -1, nil
	case '+':
		return typ, 0, nil
	}
	n, ok := length(line[1:])
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", errProtocol, line)
	}
	if typ == '!' { // blob error
		if n < 0 || r.i+n+2 > len(r.b) {
			return 0, 0, fmt.Errorf("%w: truncated error", errProtocol)
		}
		msg := r.b[r.i : r.i+n]
		r.i += n + 2
		return typ, 0, replyError(msg)
	}
	return typ, n, nil
}

// length reads the decimal number of a header line, without strconv's
// generality for the common case of a few digits: a reply has three for
// every entry.
func length(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 || b[0] == '-' || b[0] == '+' {
		n, err := strconv.Atoi(string(b))
		return n, err == nil
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// aggregate reads the header of an array, set or map and returns its
// number of elements (a map's pairs count twice), -1 for a null.
func (r *respReader) aggregate() (int, error) {
	typ, n, err := r.header()
	if err != nil {
		return 0, err
	}
	if n > len(r.b)-r.i { // each element takes at least a byte: a corrupt length
		return 0, fmt.Errorf("%w: %d elements in %d bytes", errProtocol, n, len(r.b)-r.i)
	}
	switch typ {
	case '*', '~':
		return n, nil
	case '%':
		return 2 * n, nil
	case '_', '$':
		if n < 0 {
			return -1, nil
		}
	}
	return 0, fmt.Errorf("%w: %q where an array was expected", errProtocol, typ)
}

// bulk reads a bulk (or simple) string; nil for a null.
func (r *respReader) bulk() ([]byte, error) {
	start := r.i
	typ, n, err := r.header()
	if err != nil {
		return nil, err
	}
	switch typ {
	case '$':
		if n < 0 {
			return nil, nil
		}
		if r.i+n+2 > len(r.b) {
			return nil, fmt.Errorf("%w: truncated string", errProtocol)
		}
		v := r.b[r.i : r.i+n : r.i+n]
		r.i += n + 2
		return v, nil
	case '+':
		return r.b[start+1 : r.i-2 : r.i-2], nil
	case '_':
		return nil, nil
	case ':':
		return r.b[start+1 : r.i-2 : r.i-2], nil
	}
	return nil, fmt.Errorf("%w: %q where a string was expected", errProtocol, typ)
}

// integer reads an integer reply.
func (r *respReader) integer() (int64, error) {
	b, err := r.bulk()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// entries reads an array of entries ([id, [field, value...]]); a deleted
// entry has a null for its fields.
func (r *respReader) entries(dst []entry) ([]entry, error) {
	n, err := r.aggregate()
	if err != nil || n < 0 {
		return dst, err
	}
	if dst == nil {
		dst = make([]entry, 0, n)
	}
	// The entries' fields share one backing array, two fields (a value,
	// nothing else) per entry to start with: one allocation per reply.
	back := make([][]byte, 0, 2*n)
	for range n {
		k, err := r.aggregate()
		if err != nil {
			return dst, err
		}
		if k != 2 {
			return dst, fmt.Errorf("%w: an entry of %d elements", errProtocol, k)
		}
		id, err := r.bulk()
		if err != nil {
			return dst, err
		}
		nf, err := r.aggregate()
		if err != nil {
			return dst, err
		}
		e := entry{id: string(id), deleted: nf < 0}
		if nf > 0 {
			if len(back)+nf <= cap(back) {
				e.fields = back[len(back) : len(back)+nf : len(back)+nf]
				back = back[:len(back)+nf]
			} else {
				e.fields = make([][]byte, nf)
			}
			for j := range e.fields {
				if e.fields[j], err = r.bulk(); err != nil {
					return dst, err
				}
			}
		}
		dst = append(dst, e)
	}
	return dst, nil
}

// parseRead parses an XREADGROUP reply: per stream (an array of pairs in
// RESP2, a map in RESP3), its entries; nil when the read timed out.
func parseRead(b []byte) ([]streamEntries, error) {
	r := respReader{b: b}
	n, err := r.aggregate()
	if err != nil || n < 0 {
		return nil, err
	}
	var map3 bool
	if b[0] == '%' {
		map3 = true
		n /= 2
	}
	out := make([]streamEntries, 0, n)
	for range n {
		if !map3 {
			k, err := r.aggregate()
			if err != nil {
				return nil, err
			}
			if k != 2 {
				return nil, fmt.Errorf("%w: a stream of %d elements", errProtocol, k)
			}
		}
		name, err := r.bulk()
		if err != nil {
			return nil, err
		}
		se := streamEntries{stream: string(name)}
		if se.entries, err = r.entries(nil); err != nil {
			return nil, err
		}
		out = append(out, se)
	}
	return out, nil
}

// parseAutoClaim parses an XAUTOCLAIM reply: the next cursor, the entries
// claimed, and the IDs found deleted (removed from the pending list).
func parseAutoClaim(b []byte) (next string, es []entry, deleted int, err error) {
	r := respReader{b: b}
	n, err := r.aggregate()
	if err != nil {
		return "", nil, 0, err
	}
	if n < 2 {
		return "", nil, 0, fmt.Errorf("%w: XAUTOCLAIM reply of %d elements", errProtocol, n)
	}
	c, err := r.bulk()
	if err != nil {
		return "", nil, 0, err
	}
	if es, err = r.entries(nil); err != nil {
		return "", nil, 0, err
	}
	if n >= 3 {
		k, err := r.aggregate()
		if err != nil {
			return "", nil, 0, err
		}
		for range max(k, 0) {
			if _, err := r.bulk(); err != nil {
				return "", nil, 0, err
			}
		}
		deleted = max(k, 0)
	}
	return string(c), es, deleted, nil
}

// Package redisentry is how a record (key, value, headers) is laid out in
// a Redis stream entry, shared by the Redis Streams source and sink so
// that what one writes the other reads as it was.
//
// An entry's fields are, in this order: "value" (the value's bytes, the
// field a source reads by default), "key" if the record has a key, and
// one field "h:<name>" per header, in the record's header order (a
// repeated header is written as often as it occurs). Any tool can write
// an entry a sluice source reads: `XADD orders * value '{"id":1}'`.
//
// An entry ID ("<milliseconds>-<sequence>") is carried in a message's
// Offset as milliseconds<<SeqBits | sequence: increasing in the stream's
// order, and reversible (ID) as long as the sequence stays below
// 1<<SeqBits (a million entries appended in one millisecond).
package redisentry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-streams/sluice/stream"
)

const (
	// FieldValue is the field holding a record's value.
	FieldValue = "value"
	// FieldKey is the field holding a record's key, if it has one.
	FieldKey = "key"
	// HeaderPrefix starts the field of each header: "h:" + its name.
	HeaderPrefix = "h:"
	// SeqBits is how many low bits of an Offset hold the sequence part of
	// an entry ID.
	SeqBits = 20
)

// AppendFields appends the XADD field-value pairs of a record to dst,
// the value under valueField (FieldValue if empty).
func AppendFields(dst []any, valueField string, key, value []byte, headers []stream.Header) []any {
	if valueField == "" {
		valueField = FieldValue
	}
	dst = append(dst, valueField, value)
	if key != nil {
		dst = append(dst, FieldKey, key)
	}
	for _, h := range headers {
		dst = append(dst, HeaderPrefix+h.Key, h.Value)
	}
	return dst
}

// Record is a record read back from an entry's fields.
type Record struct {
	Key, Value []byte
	Headers    []stream.Header
	// HasValue reports whether the entry had the value field at all (an
	// empty value is a value).
	HasValue bool
}

// Decode reads a record from an entry's fields, given as name, value,
// name, value... in the entry's order; fields that are neither the value,
// the key nor a header are ignored. It fails on an odd number of strings.
func Decode(valueField string, fields []string) (Record, error) {
	if valueField == "" {
		valueField = FieldValue
	}
	if len(fields)%2 != 0 {
		return Record{}, fmt.Errorf("an entry has %d field strings, want name-value pairs", len(fields))
	}
	var r Record
	for i := 0; i < len(fields); i += 2 {
		name, v := fields[i], fields[i+1]
		switch {
		case name == valueField:
			r.Value, r.HasValue = []byte(v), true
		case name == FieldKey:
			r.Key = []byte(v)
		case strings.HasPrefix(name, HeaderPrefix):
			r.Headers = append(r.Headers, stream.Header{Key: name[len(HeaderPrefix):], Value: []byte(v)})
		}
	}
	return r, nil
}

// ErrBadID is wrapped by the error of an ID that is not
// "<milliseconds>-<sequence>" or does not fit an Offset.
var ErrBadID = errors.New("not a Redis stream entry ID that fits an offset")

// Offset returns the offset that carries entry ID id.
func Offset(id string) (int64, error) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return 0, fmt.Errorf("%q: %w", id, ErrBadID)
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s, err2 := strconv.ParseUint(seq, 10, 64)
	if err1 != nil || err2 != nil || s >= 1<<SeqBits || m >= 1<<(63-SeqBits) {
		return 0, fmt.Errorf("%q: %w", id, ErrBadID)
	}
	return int64(m<<SeqBits | s), nil
}

// ID returns the entry ID an Offset carries.
func ID(offset int64) string {
	if offset < 0 {
		return strconv.FormatInt(offset, 10)
	}
	return strconv.FormatInt(offset>>SeqBits, 10) + "-" + strconv.FormatInt(offset&(1<<SeqBits-1), 10)
}

// DecodeBytes is Decode for fields read as bytes (a raw reply): the
// record's value, key and header values are the given slices, not copies.
func DecodeBytes(valueField string, fields [][]byte) (Record, error) {
	if valueField == "" {
		valueField = FieldValue
	}
	if len(fields)%2 != 0 {
		return Record{}, fmt.Errorf("an entry has %d field strings, want name-value pairs", len(fields))
	}
	var r Record
	for i := 0; i < len(fields); i += 2 {
		name, v := fields[i], fields[i+1]
		switch {
		case string(name) == valueField:
			r.Value, r.HasValue = v, true
			if r.Value == nil {
				r.Value = []byte{}
			}
		case string(name) == FieldKey:
			r.Key = v
		case len(name) >= len(HeaderPrefix) && string(name[:len(HeaderPrefix)]) == HeaderPrefix:
			r.Headers = append(r.Headers, stream.Header{Key: string(name[len(HeaderPrefix):]), Value: v})
		}
	}
	return r, nil
}

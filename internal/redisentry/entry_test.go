package redisentry

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

func TestFieldsRoundTrip(t *testing.T) {
	hs := []stream.Header{{Key: "b", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "b", Value: []byte("3")}}
	args := AppendFields(nil, "", []byte("k"), []byte("v"), hs)
	fields := make([]string, len(args))
	for i, a := range args {
		fields[i] = fmt.Sprint(a)
		if b, ok := a.([]byte); ok {
			fields[i] = string(b)
		}
	}
	want := []string{"value", "v", "key", "k", "h:b", "1", "h:a", "2", "h:b", "3"}
	if !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields = %q, want %q", fields, want)
	}
	r, err := Decode("", append(fields, "other", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Key) != "k" || string(r.Value) != "v" || !r.HasValue || !reflect.DeepEqual(r.Headers, hs) {
		t.Fatalf("Decode = %+v, want key k, value v, headers %v in order", r, hs)
	}
}

func TestDecodeWithoutValueOrKey(t *testing.T) {
	r, err := Decode("payload", []string{"value", "v"})
	if err != nil || r.HasValue || r.Key != nil {
		t.Fatalf("Decode of an entry without the field = %+v, %v; want no value, no key", r, err)
	}
	r, err = Decode("payload", []string{"payload", ""})
	if err != nil || !r.HasValue || len(r.Value) != 0 {
		t.Fatalf("Decode of an empty value = %+v, %v; want an empty value", r, err)
	}
	if _, err := Decode("", []string{"value"}); err == nil {
		t.Fatal("Decode of an odd field list = nil error")
	}
}

func TestOffsetRoundTrip(t *testing.T) {
	for _, id := range []string{"0-0", "0-1", "1700000000000-0", "1700000000000-5", "1700000000001-1048575"} {
		o, err := Offset(id)
		if err != nil {
			t.Fatalf("Offset(%q) = %v", id, err)
		}
		if got := ID(o); got != id {
			t.Fatalf("ID(Offset(%q)) = %q", id, got)
		}
	}
	a, _ := Offset("1700000000000-1048575")
	b, _ := Offset("1700000000001-0")
	if a >= b {
		t.Fatalf("offsets not in the stream's order: %d >= %d", a, b)
	}
	for _, id := range []string{"", "5", "a-1", "1-a", "1-1048576", "-1-1", "9223372036854775807-0"} {
		if _, err := Offset(id); !errors.Is(err, ErrBadID) {
			t.Fatalf("Offset(%q) = %v, want ErrBadID", id, err)
		}
	}
}

// DecodeBytes reads the same record as Decode from the same fields given
// as bytes: an empty value is a value, an empty header name a header,
// other fields are ignored, an odd count is an error.
func TestDecodeBytesAgreesWithDecode(t *testing.T) {
	for _, fields := range [][]string{
		{"value", "v", "key", "k", "h:b", "1", "h:a", "2", "h:b", "3", "other", "x"},
		{"value", "", "h:", "empty name"},
		{"data", "x", "h:trace", "t"},
		{"value"},
	} {
		bs := make([][]byte, len(fields))
		for i, f := range fields {
			bs[i] = []byte(f)
		}
		want, werr := Decode("", fields)
		got, gerr := DecodeBytes("", bs)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: Decode error %v, DecodeBytes error %v", fields, werr, gerr)
		}
		if fmt.Sprint(got.Key, got.Value, got.HasValue, got.Headers) != fmt.Sprint(want.Key, want.Value, want.HasValue, want.Headers) {
			t.Errorf("%q: DecodeBytes = %+v, Decode = %+v", fields, got, want)
		}
		if want.HasValue && got.Value == nil {
			t.Errorf("%q: an empty value read as nil", fields)
		}
	}
}

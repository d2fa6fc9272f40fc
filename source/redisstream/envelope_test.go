package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// A message carries its entry as the sink writes it: value, key, headers
// in order with repeats, the stream as Topic, the ID as Offset and its
// milliseconds as Timestamp; other fields are not headers.
func TestMessageEnvelope(t *testing.T) {
	c := client(t, testenv.Redis(t))
	headers := []stream.Header{{Key: "trace", Value: []byte("a")}, {Key: "hop", Value: []byte("1")}, {Key: "trace", Value: []byte("b")}}
	fields := redisentry.AppendFields(nil, "", []byte("k1"), []byte("v1"), headers)
	fields = append(fields, "note", "not a header")
	id, err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: "env", ID: "1700000000123-7", Values: fields}).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"env"}, Group: "g", Consumer: "c", Create: true,
		Block: 20 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the entry", count(1))
	m := r.received()[0]
	off, _ := redisentry.Offset(id)
	if string(m.Value) != "v1" || string(m.Key) != "k1" || m.Topic != "env" || m.Partition != 0 || m.Offset != off ||
		redisentry.ID(m.Offset) != id || !m.Timestamp.Equal(time.UnixMilli(1700000000123)) || m.Attempt != 0 {
		t.Fatalf("message %q key %q topic %q/%d offset %d (%s) at %v attempt %d", m.Value, m.Key, m.Topic, m.Partition,
			m.Offset, redisentry.ID(m.Offset), m.Timestamp, m.Attempt)
	}
	if len(m.Headers) != 3 {
		t.Fatalf("headers %v, want trace, hop, trace", m.Headers)
	}
	for i, h := range headers {
		if m.Headers[i].Key != h.Key || string(m.Headers[i].Value) != string(h.Value) {
			t.Fatalf("header %d = %s=%s, want %s=%s", i, m.Headers[i].Key, m.Headers[i].Value, h.Key, h.Value)
		}
	}
}

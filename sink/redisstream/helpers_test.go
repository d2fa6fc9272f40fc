package redisstream_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/stream"
)

// newClient is a client of the server at addr, closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var streams atomic.Int64

// freshStream names a stream no other test uses.
func freshStream(what string) string { return fmt.Sprintf("%s-%d", what, streams.Add(1)) }

// entry is one entry read back, its fields in order.
type entry struct {
	ID     string
	Fields []string
}

// readStream reads every entry of name, keeping the order of each
// entry's fields (a raw XRANGE: go-redis' map would lose it).
func readStream(t testing.TB, c redis.UniversalClient, name string) []entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Do(ctx, "xrange", name, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", name, err)
	}
	var out []entry
	for _, e := range v {
		pair := e.([]any)
		var fs []string
		for _, f := range pair[1].([]any) {
			fs = append(fs, f.(string))
		}
		out = append(out, entry{ID: pair[0].(string), Fields: fs})
	}
	return out
}

// records decodes entries as a source reads them.
func records(t testing.TB, es []entry) []redisentry.Record {
	t.Helper()
	var out []redisentry.Record
	for _, e := range es {
		r, err := redisentry.Decode("", e.Fields)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// header is the first header named key of r, as a string.
func header(r redisentry.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// indexOf reads i from a value "v<i>".
func indexOf(v []byte) int {
	i, err := strconv.Atoi(strings.TrimPrefix(string(v), "v"))
	if err != nil {
		panic(fmt.Sprintf("value %q is not v<index>", v))
	}
	return i
}

// numbered is a source of the values v<from>..v<to-1>, each tracked by tr.
func numbered(tr *stream.Tracker, from, to int) stream.Source[[]byte] {
	return stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for i := from; i < to; i++ {
			if err := out.Send(ctx, stream.NewMessage(fmt.Appendf(nil, "v%d", i), tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
}

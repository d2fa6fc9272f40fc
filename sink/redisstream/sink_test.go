package redisstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func TestSinkContract(t *testing.T) {
	addr := testenv.Redis(t)
	var c *redis.Client
	var name string
	streamtest.TestSink(t, streamtest.SinkCase[[]byte]{
		New: func(t *testing.T) stream.Sink[[]byte] {
			c, name = newClient(t, addr), freshStream("contract")
			return redisstream.NewSink(c, name, redisstream.Values)
		},
		Value:     func(i int) []byte { return fmt.Appendf(nil, "v%d", i) },
		Delivered: func(t *testing.T) int { return len(readStream(t, c, name)) },
		// A stream is one partition, appended to in the order the
		// messages came: a batch is one pipeline, its XADDs run in order,
		// and the next batch is sent only once the last one is answered.
		Features: streamtest.Features{OrderedPerPartition: true},
		Index:    indexOf,
		Written: func(t *testing.T) [][][]byte {
			var vs [][]byte
			for _, r := range records(t, readStream(t, c, name)) {
				vs = append(vs, r.Value)
			}
			return [][][]byte{vs}
		},
	})
}

func TestEntryKeepsKeyValueHeadersInOrder(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	name := freshStream("layout")
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		m := stream.NewMessage([]byte("payload"), stream.Handle{})
		m.Key = []byte("key-1")
		m.Headers = []stream.Header{{Key: "trace", Value: []byte("t-9")}, {Key: "hop", Value: []byte("a")}, {Key: "hop", Value: []byte("b")}}
		return out.Send(ctx, m)
	})
	stream.To(stream.From(g, src), redisstream.NewSink(c, name, redisstream.Values))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	es := readStream(t, c, name)
	if len(es) != 1 {
		t.Fatalf("%d entries, want 1", len(es))
	}
	want := []string{"value", "payload", "key", "key-1", "h:trace", "t-9", "h:hop", "a", "h:hop", "b"}
	if fmt.Sprint(es[0].Fields) != fmt.Sprint(want) {
		t.Fatalf("fields %q, want %q", es[0].Fields, want)
	}
}

func TestEntryOverMaxBytesFailsOnlyItsMessage(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	name := freshStream("maxbytes")
	tr := stream.NewTracker(0)
	values := [][]byte{[]byte("small-0"), bytes.Repeat([]byte("x"), 200), []byte("small-2")}
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, v := range values {
			if err := out.Send(ctx, stream.NewMessage(v, tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
	snk := redisstream.NewSink(c, name, redisstream.Values, redisstream.MaxBytes(100))
	stream.To(stream.From(g, src), snk)
	failures := sink.Collect[stream.Failure]()
	stream.To(g.Failures(), failures)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil: a message too large is its own failure", err)
	}
	fs := failures.Messages()
	if len(fs) != 1 || !errors.Is(fs[0].Value.Err, redisstream.ErrTooLarge) || len(fs[0].Value.Value.([]byte)) != 200 {
		t.Fatalf("failures %+v, want the 200-byte message, failed with ErrTooLarge", fs)
	}
	var got []string
	for _, r := range records(t, readStream(t, c, name)) {
		got = append(got, string(r.Value))
	}
	if fmt.Sprint(got) != "[small-0 small-2]" {
		t.Fatalf("stream holds %q, want the two small values", got)
	}
	st := tr.Stats()
	if st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 1 || st.Duplicates != 0 {
		t.Fatalf("settled %+v, want 2 completed and 1 dead-lettered", st)
	}
	if s := snk.Stats(); s.Written != 2 || s.Refused != 1 {
		t.Fatalf("stats %+v, want 2 written, 1 refused", s)
	}
}

func TestEncoderErrorAndPanicFailOnlyTheirMessage(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	name := freshStream("encoder")
	tr := stream.NewTracker(0)
	encode := func(m *stream.Message[[]byte]) (redisstream.Entry, error) {
		switch i := indexOf(m.Value); {
		case i == 3:
			return redisstream.Entry{}, errors.New("no entry for 3")
		case i == 5:
			panic("no entry for 5")
		}
		return redisstream.Values(m)
	}
	g := stream.New()
	stream.To(stream.From(g, numbered(tr, 0, 10)), redisstream.NewSink(c, name, encode))
	failures := sink.Collect[stream.Failure]()
	stream.To(g.Failures(), failures)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(readStream(t, c, name)); n != 8 {
		t.Fatalf("%d entries, want 8", n)
	}
	if n := len(failures.Messages()); n != 2 {
		t.Fatalf("%d failures, want 2", n)
	}
	var pe *stream.PanicError
	if !errors.As(failures.Messages()[1].Value.Err, &pe) {
		t.Fatalf("second failure %v, want the panic", failures.Messages()[1].Value.Err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 8 || st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("settled %+v", st)
	}
}

func TestEntryNamesItsStream(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	even, odd := freshStream("even"), freshStream("odd")
	encode := func(m *stream.Message[[]byte]) (redisstream.Entry, error) {
		e, _ := redisstream.Values(m)
		if indexOf(m.Value)%2 == 1 {
			e.Stream = odd
		}
		return e, nil
	}
	g := stream.New()
	stream.To(stream.From(g, numbered(stream.NewTracker(0), 0, 10)), redisstream.NewSink(c, even, encode))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e, o := len(readStream(t, c, even)), len(readStream(t, c, odd)); e != 5 || o != 5 {
		t.Fatalf("%d even and %d odd entries, want 5 each", e, o)
	}
}

func TestMaxLenTrimsApproximately(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	name := freshStream("maxlen")
	const n, maxLen = 2000, 300
	g := stream.New()
	stream.To(stream.From(g, numbered(stream.NewTracker(0), 0, n)), redisstream.NewSink(c, name, redisstream.Values, redisstream.MaxLen(maxLen)))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := records(t, readStream(t, c, name))
	// MAXLEN ~ removes whole nodes of the stream (stream-node-max-entries,
	// 100 by default): at least maxLen entries stay, fewer than a node
	// more, and they are the newest.
	if len(rs) < maxLen || len(rs) >= maxLen+100 {
		t.Fatalf("%d entries after %d appends with MaxLen(%d), want %d to %d", len(rs), n, maxLen, maxLen, maxLen+99)
	}
	for i, r := range rs {
		if want := n - len(rs) + i; indexOf(r.Value) != want {
			t.Fatalf("entry %d holds %s, want v%d: the newest entries stay", i, r.Value, want)
		}
	}
}

func TestBadArguments(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name string
		snk  *redisstream.Sink[[]byte]
		arg  string
	}{
		{"no client", redisstream.NewSink[[]byte](nil, "s", redisstream.Values), "client"},
		{"no encoder", redisstream.NewSink[[]byte](c, "s", nil), "encode"},
		{"no stream", redisstream.NewSink(c, "", redisstream.Values), "streamName"},
		{"negative MaxLen", redisstream.NewSink(c, "s", redisstream.Values, redisstream.MaxLen(-1)), "MaxLen"},
		{"MaxBytes 0", redisstream.NewSink(c, "s", redisstream.Values, redisstream.MaxBytes(0)), "MaxBytes"},
		{"negative RetryFor", redisstream.NewSink(c, "s", redisstream.Values, redisstream.RetryFor(-1)), "RetryFor"},
		{"BatchSize 0", redisstream.NewSink(c, "s", redisstream.Values, redisstream.BatchSize(0)), "BatchSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := stream.New()
			stream.To(stream.From(g, numbered(stream.NewTracker(0), 0, 1)), tc.snk)
			err := g.Run(context.Background())
			var ce *stream.ConfigError
			if !errors.As(err, &ce) || ce.Argument != tc.arg {
				t.Fatalf("Run = %v, want a *stream.ConfigError naming %s", err, tc.arg)
			}
		})
	}
}

func TestKeyOfAnotherTypeIsFatalAndLeavesMessagesUnsettled(t *testing.T) {
	c := newClient(t, testenv.Redis(t))
	name := freshStream("not-a-stream")
	if err := c.Set(context.Background(), name, "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, numbered(tr, 0, 10)), redisstream.NewSink(c, name, redisstream.Values))
	err := g.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Run = %v, want the server's refusal naming stream %s", err, name)
	}
	if st := tr.Stats(); st.Total() != 0 {
		t.Fatalf("settled %+v, want nothing: no entry was written", st)
	}
}

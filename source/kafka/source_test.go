package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

var quiet = slog.New(slog.DiscardHandler)

func newSource(t testing.TB, brokers []string, group string, mut ...func(*kafka.Config)) *kafka.Source {
	t.Helper()
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: brokers, ConnectTimeout: 5 * time.Second}, Group: group,
		Topics: []string{"in"}, Logger: quiet}
	for _, m := range mut {
		m(&cfg)
	}
	src, err := kafka.NewSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestHeaderLayoutMatchesFranzGo(t *testing.T) {
	var a kgo.RecordHeader
	var b stream.Header
	if unsafe.Sizeof(a) != unsafe.Sizeof(b) || unsafe.Offsetof(a.Value) != unsafe.Offsetof(b.Value) {
		t.Fatal("stream.Header no longer has kgo.RecordHeader's layout: the source's zero-copy header cast is wrong")
	}
}

// consume runs src -> MapAsync -> checkpoint until want messages reached
// the sink, then cancels, drains and closes the source.
func consume(t *testing.T, src *kafka.Source, want int, seen func(stream.Message[[]byte])) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var n atomic.Int64
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, src), flow.MapAsync(16,
		func(_ context.Context, v []byte) ([]byte, error) { return v, nil }))
	s = stream.Via(s, stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range b.Items {
				if seen != nil {
					seen(m)
				}
				if err := out.Send(ctx, m); err != nil {
					return err
				}
				if n.Add(1) == int64(want) {
					cancel()
				}
			}
			b.Release()
		}
	}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(50*time.Millisecond)))
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got < int64(want) {
		t.Fatalf("consumed %d of %d", got, want)
	}
}

func TestConsumesEverythingAndCommitsTheEnd(t *testing.T) {
	brokers := testenv.Kfake(t, 4, "in")
	testenv.Produce(t, brokers, "in", 10_000, func(i int) []byte { return fmt.Appendf(nil, "v%d", i) })
	seen := map[string]int{}
	var mu sync.Mutex
	committed := map[int32]int64{}
	src := newSource(t, brokers, "g1", func(c *kafka.Config) {
		c.OnCommit = func(_ string, p int32, off int64) {
			mu.Lock()
			if off < committed[p] {
				t.Errorf("partition %d: commit went back from %d to %d", p, committed[p], off)
			}
			committed[p] = off
			mu.Unlock()
		}
	})
	consume(t, src, 10_000, func(m stream.Message[[]byte]) {
		mu.Lock()
		seen[string(m.Value)]++
		mu.Unlock()
		if !bytes.HasPrefix(m.Key, []byte("k")) || m.Topic != "in" || m.Timestamp.IsZero() {
			t.Errorf("envelope %+v", m.Envelope)
		}
	})
	if len(seen) != 10_000 {
		t.Fatalf("%d distinct values", len(seen))
	}
	var total int64
	for _, off := range committed {
		total += off
	}
	if total != 10_000 {
		t.Fatalf("committed offsets %v add to %d, want 10000 (everything)", committed, total)
	}
	// A new member of the group starts after the committed offsets: nothing
	// is left to read.
	testenv.Produce(t, brokers, "in", 10, func(i int) []byte { return fmt.Appendf(nil, "late%d", i) })
	var again []string
	consume(t, newSource(t, brokers, "g1"), 10, func(m stream.Message[[]byte]) { again = append(again, string(m.Value)) })
	for _, v := range again {
		if !strings.HasPrefix(v, "late") {
			t.Fatalf("re-read %q after it was committed", v)
		}
	}
}

func TestSourceContract(t *testing.T) {
	streamtest.TestSource(t, streamtest.SourceCase[[]byte]{
		New: func(t *testing.T, n int) stream.Source[[]byte] {
			brokers := testenv.Kfake(t, 3, "in")
			testenv.Produce(t, brokers, "in", n+100, indexValue(0))
			src := newSource(t, brokers, "contract")
			t.Cleanup(func() { _ = src.Close(context.Background()) })
			return src
		},
		Index: valueIndex,
		// Everything a consumer group gives. The server restart is kfake's,
		// on the same port with its data on disk.
		Features: streamtest.Features{OrderedPerPartition: true, ReplayAfterRestart: true, RedeliversUnsettled: true,
			ReconnectsAfterServerRestart: true},
		Restart: func(t *testing.T) streamtest.RestartCase[[]byte] {
			k := testenv.StartKfake(t, kfake.SeedTopics(3, "in"))
			return streamtest.RestartCase[[]byte]{
				Produce: func(t *testing.T, first, n int) {
					testenv.Produce(t, k.Addrs(), "in", n, indexValue(first))
				},
				NewSource:     func(t *testing.T) streamtest.Resumable[[]byte] { return newSource(t, k.Addrs(), "contract") },
				RestartServer: func(t *testing.T) { k.Restart(t) },
			}
		},
	})
}

// indexValue returns the values of a produce call whose first record has
// the index first: the index in decimal.
func indexValue(first int) func(i int) []byte {
	return func(i int) []byte { return strconv.AppendInt(nil, int64(first+i), 10) }
}

// valueIndex reads back the index indexValue wrote.
func valueIndex(v []byte) int {
	i, err := strconv.Atoi(string(v))
	if err != nil {
		panic(fmt.Sprintf("value %q is not an index", v))
	}
	return i
}

func TestRecordShapes(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	big := bytes.Repeat([]byte("x"), 1<<20)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	recs := []*kgo.Record{
		{Topic: "in", Key: nil, Value: nil},
		{Topic: "in", Key: []byte("k"), Value: []byte{}},
		{Topic: "in", Value: big, Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "empty"}}},
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	var got []stream.Message[[]byte]
	consume(t, newSource(t, brokers, "shapes", func(c *kafka.Config) {
		c.Opts = append(c.Opts, kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(4<<20))
	}), 3, func(m stream.Message[[]byte]) { got = append(got, m) })
	// The three records may be written in any order (ProduceSync sends the
	// 1 MiB one in a batch of its own): tell them apart by shape.
	var null, empty, large *stream.Message[[]byte]
	for i := range got {
		switch m := &got[i]; {
		case m.Key == nil && len(m.Value) < 1<<20:
			null = m
		case string(m.Key) == "k":
			empty = m
		default:
			large = m
		}
	}
	if null == nil || null.Value != nil {
		t.Errorf("null value: record %v", null != nil)
	} else if empty == nil || empty.Value == nil || len(empty.Value) != 0 {
		t.Errorf("empty value lost its shape")
	} else if large == nil || !bytes.Equal(large.Value, big) || string(large.Header("trace")) != "abc" || len(large.Headers) != 2 {
		t.Errorf("1 MiB record with headers: found %v", large != nil)
	}
}

func TestBadConfigAndUnreachableBrokers(t *testing.T) {
	_, err := kafka.NewSource(context.Background(), kafka.Config{Topics: []string{"x"}, Conn: kafka.Conn{SASL: &kafka.SASL{Mechanism: "MD5"}}})
	if !errors.Is(err, kafka.ErrConfig) || !errors.Is(err, stream.ErrInvalid) || !strings.Contains(err.Error(), "MD5") {
		t.Fatalf("config error %v should match ErrConfig and stream.ErrInvalid and name the bad mechanism", err)
	}
	named := map[string]bool{}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, f := range j.Unwrap() {
				var ce *stream.ConfigError
				if errors.As(f, &ce) && ce.Stage == "kafka source" {
					named[ce.Argument] = true
				}
			}
		}
	}
	if !named["Brokers"] || !named["Group"] || !named["SASL.Mechanism"] {
		t.Fatalf("config error %v: *stream.ConfigError arguments %v, want Brokers, Group and SASL.Mechanism", err, named)
	}
	t.Log(err)

	brokers := testenv.Kfake(t, 1, "in")
	_, err = kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "g", Topics: []string{"nope"}, Logger: quiet})
	if !errors.Is(err, kafka.ErrUnknownTopic) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown topic: %v", err)
	}
	t.Log(err)

	// Nothing listens on this port: a clear error within ConnectTimeout.
	began := time.Now()
	_, err = kafka.NewSource(context.Background(), kafka.Config{
		Conn: kafka.Conn{Brokers: []string{"127.0.0.1:1"}, ConnectTimeout: 500 * time.Millisecond}, Group: "g", Topics: []string{"in"}, Logger: quiet})
	if !errors.Is(err, kafka.ErrBrokerUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable broker: %v", err)
	}
	if el := time.Since(began); el > 10*time.Second {
		t.Fatalf("took %v to report an unreachable broker", el)
	}
	t.Log(err)
}

func TestInvalidSASLCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the broker to refuse the credentials: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "in"), kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "secret"))
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: brokers, ConnectTimeout: 3 * time.Second,
		SASL: &kafka.SASL{Mechanism: "PLAIN", User: "admin", Password: "wrong"}}, Group: "g", Topics: []string{"in"}, Logger: quiet}
	_, err := kafka.NewSource(context.Background(), cfg)
	// kfake closes the connection on bad credentials (a real broker answers
	// with an error code: see the integration suite).
	if !errors.Is(err, kafka.ErrBrokerUnreachable) || !strings.Contains(err.Error(), "rejected the credentials") {
		t.Fatalf("wrong password: %v, want an error that points at the credentials", err)
	}
	t.Log(err)
	cfg.SASL.Password = "secret"
	src, err := kafka.NewSource(context.Background(), cfg)
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	src.Close(context.Background())
}

func TestRecordsProducedByKcat(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	// kcat, an independent client: keyed records with a header, and with -Z
	// an empty value is produced as a null value.
	testenv.Kcat(t, []byte("k1:hello\nk2:\nk3:world\n"), "-b", brokers[0], "-t", "in", "-P", "-K:", "-Z", "-H", "origin=kcat")
	// kcat may send the lines in separate batches and retry one (librdkafka
	// without idempotence): the log's order need not be the input's, so
	// records are matched by key. (One run of make test got k2, k3, k1.)
	got := map[string]stream.Message[[]byte]{}
	consume(t, newSource(t, brokers, "kcat"), 3, func(m stream.Message[[]byte]) { got[string(m.Key)] = m })
	want := []struct {
		key  string
		val  []byte
		null bool
	}{{"k1", []byte("hello"), false}, {"k2", nil, true}, {"k3", []byte("world"), false}}
	for _, w := range want {
		m, ok := got[w.key]
		if !ok || !bytes.Equal(m.Value, w.val) || (m.Value == nil) != w.null || string(m.Header("origin")) != "kcat" {
			t.Errorf("record %s: found %v, value %q (nil %v) headers %v", w.key, ok, m.Value, m.Value == nil, m.Headers)
		}
	}
}

func TestSASLAgainstAListenerWithoutSASL(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a SASL handshake to time out: make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 1, "in")
	_, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers, ConnectTimeout: 3 * time.Second,
		SASL: &kafka.SASL{Mechanism: "PLAIN", User: "u", Password: "p"}}, Group: "g", Topics: []string{"in"}, Logger: quiet})
	// kfake closes the connection; a real broker answers ILLEGAL_SASL_STATE
	// (see the integration suite). Either way the error says what to check.
	if err == nil || !strings.Contains(err.Error(), "does not speak SASL") {
		t.Fatalf("SASL against a plaintext listener: %v, want a hint that the listener may not speak SASL", err)
	}
}

func TestClientLinesReachTheHandler(t *testing.T) {
	var buf bytes.Buffer
	l := kafka.NewLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if l.Level() != kgo.LogLevelWarn {
		t.Fatalf("at info the client logs from %v, want warn (its info lines are for debugging)", l.Level())
	}
	l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:1", "err", errors.New("connection refused"))
	l.Log(kgo.LogLevelDebug, "wrote Fetch")
	for range 20 {
		l.Log(kgo.LogLevelError, "heartbeat errored", "group", "g")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], `level=WARN msg="unable to open connection to broker" component=franz-go addr=127.0.0.1:1 err="connection refused"`) ||
		!strings.Contains(lines[1], "level=ERROR") {
		t.Fatalf("%d lines (want the warning and 3 of the 20 errors):\n%s", len(lines), buf.String())
	}
	if d := kafka.NewLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))); d.Level() != kgo.LogLevelInfo {
		t.Fatalf("at debug the client logs from %v, want info", d.Level())
	}
}

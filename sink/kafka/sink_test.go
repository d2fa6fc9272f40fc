package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readAll reads every record of topic from the start, until n arrived.
func readAll(t testing.TB, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func TestSinkContract(t *testing.T) {
	var brokers []string
	streamtest.TestSink(t, streamtest.SinkCase[[]byte]{
		New: func(t *testing.T) stream.Sink[[]byte] {
			brokers = testenv.Kfake(t, 3, "out")
			return kafkasink.NewSink(client(t, brokers), kafkasink.Records("out"))
		},
		Value:     func(i int) []byte { return fmt.Appendf(nil, "v%d", i) },
		Delivered: func(t *testing.T) int { return len(readAll(t, brokers, "out", 2000)) },
		// The client's idempotent producer keeps each partition's records
		// in the order they were produced, retries included.
		Features: streamtest.Features{OrderedPerPartition: true},
		Index: func(v []byte) int {
			i, err := strconv.Atoi(strings.TrimPrefix(string(v), "v"))
			if err != nil {
				panic(fmt.Sprintf("value %q is not v<index>", v))
			}
			return i
		},
		Written: func(t *testing.T) [][][]byte {
			byPartition := map[int32][][]byte{}
			for _, r := range readAll(t, brokers, "out", 2000) {
				byPartition[r.Partition] = append(byPartition[r.Partition], r.Value)
			}
			var parts [][][]byte
			for _, vs := range byPartition {
				parts = append(parts, vs)
			}
			return parts
		},
	})
}

func TestRecordsKeepKeyValueHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		m := stream.NewMessage([]byte("payload"), stream.Handle{})
		m.Key = []byte("key-1")
		m.Headers = []stream.Header{{Key: "trace", Value: []byte("t-9")}}
		return out.Send(ctx, m)
	})
	stream.To(stream.From(g, src), kafkasink.NewSink(client(t, brokers), kafkasink.Records("out")))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, brokers, "out", 1)[0]
	if string(r.Key) != "key-1" || string(r.Value) != "payload" || len(r.Headers) != 1 || string(r.Headers[0].Value) != "t-9" {
		t.Fatalf("record %+v", r)
	}
	// kcat, an independent client, reads the same record.
	out := testenv.Kcat(t, nil, "-b", brokers[0], "-t", "out", "-C", "-e", "-q", "-f", `%k|%s|%h\n`)
	if got := strings.TrimSpace(string(out)); got != "key-1|payload|trace=t-9" {
		t.Fatalf("kcat read %q", got)
	}
}

func TestDeadLetterRecordsReasonAndPosition(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "dlq")
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.From(g, source.Slice([][]byte{[]byte("ok"), []byte("bad")}, source.Track(tr)))
	stream.To(s, sink.Func(func(_ context.Context, v []byte) error {
		if string(v) == "bad" {
			return errors.New("cannot parse")
		}
		return nil
	}), stream.Name("parse"))
	dl := kafkasink.NewDeadLetter(client(t, brokers), "dlq")
	stream.To(g.Failures(), dl)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, brokers, "dlq", 1)[0]
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	if string(r.Value) != "bad" || h[kafkasink.HeaderStage] != "parse" || h[kafkasink.HeaderReason] != "cannot parse" ||
		h[kafkasink.HeaderAttempt] != "0" || h[kafkasink.HeaderFailedAt] == "" {
		t.Fatalf("dead letter %q with headers %v", r.Value, h)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 || st.Settled[stream.Completed] != 1 || dl.Stats().Produced != 1 {
		t.Fatalf("settled %+v, produced %d", st.Settled, dl.Stats().Produced)
	}
}

// A failure sink writes what it is given as NewSink does and settles it
// as dead-lettered: its records are failures, not completed work.
func TestFailureSinkSettlesDeadLettered(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "events")
	tr := stream.NewTracker(0)
	g := stream.New()
	fs := kafkasink.NewFailureSink(client(t, brokers), kafkasink.Records("events"))
	stream.To(stream.From(g, source.Slice([][]byte{[]byte("a"), []byte("b")}, source.Track(tr))), fs)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 2 || st.Settled[stream.Completed] != 0 || fs.Stats().Produced != 2 {
		t.Fatalf("settled %+v, produced %d", st.Settled, fs.Stats().Produced)
	}
	if n := len(readAll(t, brokers, "events", 1)); n != 2 {
		t.Fatalf("%d records on the topic, want 2", n)
	}
}

func TestTooLargeRecordIsDeadLetteredOthersGoOn(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	vals := [][]byte{[]byte("a"), bytes.Repeat([]byte("x"), 2<<20), []byte("c")}
	stream.To(stream.From(g, source.Slice(vals, source.Track(tr))),
		kafkasink.NewSink(client(t, brokers, kgo.ProducerBatchMaxBytes(1<<20)), kafkasink.Records("out")))
	var reasons []string
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		reasons = append(reasons, m.Value.Err.Error())
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "MESSAGE_TOO_LARGE") {
		t.Fatalf("reasons %q", reasons)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
}

func TestUnknownTopicIsFatalAndLeavesMessagesUnsettled(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([][]byte{[]byte("a")}, source.Track(tr))),
		kafkasink.NewSink(client(t, brokers, kgo.RecordDeliveryTimeout(2*time.Second)), kafkasink.Records("missing")),
		stream.Name("out"))
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "out" || !stream.IsFatal(err) {
		t.Fatalf("Run = %v, want a fatal error from stage out", err)
	}
	if tr.Stats().Total() != 0 {
		t.Fatalf("settled %+v: the message must stay unsettled", tr.Stats().Settled)
	}
	t.Log(err)
}

func TestEncoderPanicFailsOnlyThatMessage(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	encode := func(m *stream.Message[[]byte]) (*kgo.Record, error) {
		if string(m.Value) == "boom" {
			panic("encoder bug")
		}
		return &kgo.Record{Topic: "out", Value: m.Value}, nil
	}
	stream.To(stream.From(g, source.Slice([][]byte{[]byte("a"), []byte("boom"), []byte("c")}, source.Track(tr))),
		kafkasink.NewSink(client(t, brokers), encode))
	var failures []stream.Failure
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		failures = append(failures, m.Value)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil: a panic in the encoder fails only its message", err)
	}
	if len(failures) != 1 {
		t.Fatalf("failures %v", failures)
	}
	if pe, ok := failures[0].Err.(*stream.PanicError); !ok || pe.Value != "encoder bug" || string(failures[0].Value.([]byte)) != "boom" {
		t.Fatalf("failure %v (%T), want the panic of the message boom", failures[0], failures[0].Err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	if got := len(readAll(t, brokers, "out", 2)); got != 2 {
		t.Fatalf("%d records", got)
	}
}

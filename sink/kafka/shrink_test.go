package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// maxMessageBytes is the broker's message.max.bytes in these tests: the
// broker refuses a record batch larger than this.
const maxMessageBytes = 32 << 10

// smallBroker starts a broker that refuses batches over maxMessageBytes.
func smallBroker(t *testing.T, topics ...string) []string {
	return testenv.KfakeWith(t, kfake.SeedTopics(1, topics...),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(maxMessageBytes)}))
}

// noise returns n random lower-case letters: a value that compression
// does not shrink (franz-go compresses batches with snappy by default).
func noise(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return b
}

// input is a message of a test source: value, key and headers.
type input struct {
	value   []byte
	key     string
	headers []stream.Header
}

// inputs is a source of the given messages, tracked by tr.
func inputs(tr *stream.Tracker, ins ...input) stream.Source[[]byte] {
	return stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, in := range ins {
			m := stream.NewMessage(in.value, tr.Track())
			m.Key, m.Headers = []byte(in.key), in.headers
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// rejectLarge is a sink that completes values of at most 16 bytes and fails
// the others with reason.
func rejectLarge(reason string) stream.Sink[[]byte] {
	return sink.Func(func(_ context.Context, v []byte) error {
		if len(v) > 16 {
			return errors.New(reason)
		}
		return nil
	})
}

func headerMap(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

// TestDeadLetterTooLargeIsWrittenTruncated: a value close to the broker's
// limit makes a dead letter (value plus headers) the broker refuses. It is
// written with its value cut to half, not allowed to stop the pipeline.
func TestDeadLetterTooLargeIsWrittenTruncated(t *testing.T) {
	brokers := smallBroker(t, "dlq")
	big := noise(maxMessageBytes - 200)
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, inputs(tr,
		input{value: []byte("ok")},
		input{value: big, key: "k-big", headers: []stream.Header{{Key: "trace", Value: []byte("t-1")}}},
	)), rejectLarge("cannot parse"), stream.Name("parse"))
	dl := kafkasink.NewDeadLetter(client(t, brokers), "dlq")
	stream.To(g.Failures(), dl)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil: a dead letter too large to write must not stop the pipeline", err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 || st.Settled[stream.Completed] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "dlq", 1)[0]
	h := headerMap(r)
	if h[kafkasink.HeaderTruncated] != "true" || h[kafkasink.HeaderOriginalSize] != strconv.Itoa(len(big)) {
		t.Fatalf("headers %v: want %s=true and %s=%d", h, kafkasink.HeaderTruncated, kafkasink.HeaderOriginalSize, len(big))
	}
	if len(r.Value) != len(big)/2 || !bytes.HasPrefix(big, r.Value) {
		t.Fatalf("value of %d bytes, want the first %d bytes of the original", len(r.Value), len(big)/2)
	}
	if string(r.Key) != "k-big" || h["trace"] != "t-1" || h[kafkasink.HeaderReason] != "cannot parse" ||
		h[kafkasink.HeaderStage] != "parse" || h[kafkasink.HeaderAttempt] != "0" || h[kafkasink.HeaderFailedAt] == "" {
		t.Fatalf("key %q, headers %v: want the original key and headers and the failure's", r.Key, h)
	}
	if _, ok := h[kafkasink.HeaderHeadersDropped]; ok {
		t.Fatalf("headers %v: the original headers were kept", h)
	}
	if dl.Stats().Produced != 1 || dl.Stats().Shrunk != 1 {
		t.Fatalf("produced %d, shrunk %d", dl.Stats().Produced, dl.Stats().Shrunk)
	}
}

// TestDeadLetterStillTooLargeIsWrittenAsHeaders: when even half the value
// with the original headers is too large, the dead letter is written
// without value and without the original headers, its reason capped.
func TestDeadLetterStillTooLargeIsWrittenAsHeaders(t *testing.T) {
	brokers := smallBroker(t, "dlq")
	big := noise(3 * maxMessageBytes)
	reason := string(noise(2 * maxMessageBytes))
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, inputs(tr, input{value: big, key: "k-big",
		headers: []stream.Header{{Key: "trace", Value: []byte("t-1")}, {Key: "blob", Value: noise(maxMessageBytes)}}},
	)), rejectLarge(reason), stream.Name("parse"))
	dl := kafkasink.NewDeadLetter(client(t, brokers), "dlq")
	stream.To(g.Failures(), dl)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "dlq", 1)[0]
	h := headerMap(r)
	if len(r.Value) != 0 || h[kafkasink.HeaderHeadersDropped] != "2" || h["trace"] != "" || h["blob"] != "" {
		t.Fatalf("value of %d bytes, headers %v: want no value and the 2 original headers dropped", len(r.Value), h)
	}
	if got := h[kafkasink.HeaderReason]; len(got) > kafkasink.MaxReasonBytes || !strings.HasPrefix(reason, got) || len(got) < 1024 {
		t.Fatalf("reason header of %d bytes: want the reason's first %d bytes", len(got), kafkasink.MaxReasonBytes)
	}
	if h[kafkasink.HeaderOriginalSize] != strconv.Itoa(len(big)) || h[kafkasink.HeaderStage] != "parse" ||
		h[kafkasink.HeaderFailedAt] == "" || string(r.Key) != "k-big" {
		t.Fatalf("key %q, headers %v", r.Key, h)
	}
}

// TestParkingTooLargeIsNeverCut: a parked record is replayed as the
// message it holds, so a parking never cuts its value, nor writes it as
// headers only: a value close to the broker's limit, which the parking's
// headers take past it, stops the pipeline with its message unsettled
// (a parking without a compact form has nothing smaller that replays as
// the same message), naming the topic. A reason too large (a service's
// long answer) is capped: the value is written whole.
func TestParkingTooLargeIsNeverCut(t *testing.T) {
	brokers := smallBroker(t, "retry", "retry-2")
	big := noise(maxMessageBytes - 100)
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, inputs(tr, input{value: big})), rejectLarge("service unavailable"))
	stream.To(g.Failures(), kafkasink.NewParking(client(t, brokers), "retry", time.Minute))
	err := g.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"retry"`) || !strings.Contains(err.Error(), "MESSAGE_TOO_LARGE") {
		t.Errorf("Run = %v, want the pipeline stopped with an error naming the topic and the refusal", err)
	}
	if st := tr.Stats(); st.Total() != 0 {
		t.Errorf("settled %+v: want the message left unsettled, for a replay", st.Settled)
	}
	if ends := testenv.EndOffsets(t, brokers, "retry"); ends[0] != 0 {
		r := readAll(t, brokers, "retry", 1)[0]
		t.Errorf("a parked record of %d bytes was written (headers %v): its replay would not be the message", len(r.Value), headerMap(r))
	}

	// The reason, not the value, is what is too large.
	tr = stream.NewTracker(0)
	g = stream.New()
	value := noise(200)
	stream.To(stream.From(g, inputs(tr, input{value: value})), rejectLarge(string(noise(2*maxMessageBytes))))
	stream.To(g.Failures(), kafkasink.NewParking(client(t, brokers), "retry-2", time.Minute))
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	r := readAll(t, brokers, "retry-2", 1)[0]
	h := headerMap(r)
	if !bytes.Equal(r.Value, value) || len(h[kafkasink.HeaderReason]) > kafkasink.MaxReasonBytes || h[kafkasink.HeaderReplayAt] == "" {
		t.Fatalf("parked record of %d bytes (want the %d of the value), reason of %d bytes (want at most %d), headers %v",
			len(r.Value), len(value), len(h[kafkasink.HeaderReason]), kafkasink.MaxReasonBytes, h)
	}
}

// TestParkingCompactForm: a parking with a compact form writes it in place
// of a record too large for the topic: the compact key, value and headers,
// with the parking's headers (one set: the failure, the replay time, the
// count of parkings) and the original position and first failure time of
// a message replayed from the parking.
func TestParkingCompactForm(t *testing.T) {
	brokers := smallBroker(t, "retry")
	big := noise(maxMessageBytes - 100)
	first := "2030-01-01T00:00:00Z"
	tr := stream.NewTracker(0)
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		fresh := stream.NewMessage(big, tr.Track())
		fresh.Key, fresh.Headers = []byte("k-fresh"), []stream.Header{{Key: "trace", Value: []byte("t-1")}}
		// A message replayed from the parking, parked twice before.
		again := stream.NewMessage(big, tr.Track())
		again.Key, again.Topic, again.Partition, again.Offset = []byte("k-again"), "retry", 0, 7
		again.Headers = []stream.Header{{Key: "trace", Value: []byte("t-2")}, {Key: kafkasink.HeaderTopic, Value: []byte("requests")},
			{Key: kafkasink.HeaderPartition, Value: []byte("3")}, {Key: kafkasink.HeaderOffset, Value: []byte("42")},
			{Key: kafkasink.HeaderFirstFailure, Value: []byte(first)}, {Key: kafkasink.HeaderParkings, Value: []byte("2")},
			{Key: kafkasink.HeaderReplayAt, Value: []byte(first)}}
		for _, m := range []stream.Message[[]byte]{fresh, again} {
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	stream.To(stream.From(g, src), rejectLarge("service unavailable"))
	park := kafkasink.NewParking(client(t, brokers), "retry", time.Minute, kafkasink.WithCompact(
		func(m *stream.Message[stream.Failure]) *kgo.Record {
			return &kgo.Record{Key: append([]byte("small-"), m.Key...), Value: []byte("compact"), Headers: []kgo.RecordHeader{
				{Key: "compacted", Value: []byte("yes")}, {Key: kafkasink.HeaderReason, Value: []byte("stale")},
				{Key: kafkasink.HeaderParkings, Value: []byte("9")}, {Key: kafkasink.HeaderTopic, Value: []byte("elsewhere")}}}
		}))
	stream.To(g.Failures(), park)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != 2 || park.Stats().Shrunk != 2 {
		t.Fatalf("settled %+v, shrunk %d: want both parked in their compact form", st.Settled, park.Stats().Shrunk)
	}
	for _, r := range readAll(t, brokers, "retry", 2) {
		seen := map[string]int{}
		for _, h := range r.Headers {
			seen[h.Key]++
		}
		for k, n := range seen {
			if n > 1 {
				t.Fatalf("record of %s has %d headers %s: %v", r.Key, n, k, headerMap(r))
			}
		}
		h := headerMap(r)
		if string(r.Value) != "compact" || h["compacted"] != "yes" || h["trace"] != "" || h[kafkasink.HeaderReason] != "service unavailable" ||
			h[kafkasink.HeaderReplayAt] == "" || h[kafkasink.HeaderReplayAt] == first || h[kafkasink.HeaderTruncated] != "" {
			t.Fatalf("record of %s: value %q, headers %v: want the compact form with the parking's headers", r.Key, r.Value, h)
		}
		switch string(r.Key) {
		case "small-k-fresh":
			if h[kafkasink.HeaderParkings] != "1" || h[kafkasink.HeaderTopic] != "" {
				t.Fatalf("record of a first parking: headers %v", h)
			}
		case "small-k-again":
			if h[kafkasink.HeaderParkings] != "3" || h[kafkasink.HeaderTopic] != "requests" || h[kafkasink.HeaderPartition] != "3" ||
				h[kafkasink.HeaderOffset] != "42" || h[kafkasink.HeaderFirstFailure] != first {
				t.Fatalf("record of a third parking: headers %v: want the original position and first failure, 3 parkings", h)
			}
		default:
			t.Fatalf("record with key %q", r.Key)
		}
	}
}

// unencodable is a value whose JSON encoding panics.
type unencodable struct{}

func (unencodable) MarshalJSON() ([]byte, error) { panic("cannot encode") }

// TestDeadLetterEncoderPanicIsWrittenAsHeaders: a failed value that cannot
// be encoded is dead-lettered without it.
func TestDeadLetterEncoderPanicIsWrittenAsHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "dlq")
	tr := stream.NewTracker(0)
	g := stream.New()
	src := stream.SourceFunc[unencodable](func(ctx context.Context, out *stream.Outlet[unencodable]) error {
		m := stream.NewMessage(unencodable{}, tr.Track())
		m.Key, m.Headers = []byte("k-1"), []stream.Header{{Key: "trace", Value: []byte("t-1")}}
		return out.Send(ctx, m)
	})
	stream.To(stream.From(g, src), sink.Func(func(context.Context, unencodable) error { return errors.New("rejected") }),
		stream.Name("check"))
	dl := kafkasink.NewDeadLetter(client(t, brokers), "dlq")
	stream.To(g.Failures(), dl)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "dlq", 1)[0]
	h := headerMap(r)
	if len(r.Value) != 0 || h[kafkasink.HeaderHeadersDropped] != "1" || h[kafkasink.HeaderReason] != "rejected" ||
		h[kafkasink.HeaderStage] != "check" || string(r.Key) != "k-1" {
		t.Fatalf("value %q, key %q, headers %v", r.Value, r.Key, h)
	}
}

// TestShrinkerOfAnOrdinarySink: the mechanism is the sink's, for any
// encoder: a record the client refuses is replaced by what the Shrinker
// returns; a Shrinker that gives up, or panics, fails the message to the
// failure stream as without one.
func TestShrinkerOfAnOrdinarySink(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	vals := [][]byte{[]byte("a"), bytes.Repeat([]byte("x"), 2<<20), bytes.Repeat([]byte("y"), 2<<20), bytes.Repeat([]byte("z"), 2<<20)}
	var steps []int
	out := kafkasink.NewSink(client(t, brokers, kgo.ProducerBatchMaxBytes(1<<20)), kafkasink.Records("out"),
		kafkasink.WithShrinker(func(m *stream.Message[[]byte], rec *kgo.Record, step int, err error) *kgo.Record {
			steps = append(steps, step)
			switch m.Value[0] {
			case 'x':
				if step == 1 {
					return &kgo.Record{Topic: rec.Topic, Value: rec.Value[:1<<21]} // still too large
				}
				return &kgo.Record{Topic: rec.Topic, Value: rec.Value[:10]}
			case 'y':
				return nil
			default:
				panic("shrinker bug")
			}
		}))
	src := stream.SourceFunc[[]byte](func(ctx context.Context, o *stream.Outlet[[]byte]) error {
		for _, v := range vals {
			if err := o.Send(ctx, stream.NewMessage(v, tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
	stream.To(stream.From(g, src), out)
	var failures []stream.Failure
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		failures = append(failures, m.Value)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("settled %+v, failures %v", st.Settled, failures)
	}
	panics := 0
	for _, f := range failures {
		var pe *stream.PanicError
		if errors.As(f.Err, &pe) {
			panics++
		}
		if !strings.Contains(f.Error(), "MESSAGE_TOO_LARGE") {
			t.Fatalf("failure %v: want the produce error as the reason", f)
		}
	}
	if len(failures) != 2 || panics != 1 {
		t.Fatalf("failures %v: want the one the shrinker gave up on and the one it panicked on", failures)
	}
	slices.Sort(steps)
	if !slices.Equal(steps, []int{1, 1, 1, 2}) {
		t.Fatalf("shrinker asked at steps %v", steps)
	}
	var got []string
	for _, r := range readAll(t, brokers, "out", 2) {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "xxxxxxxxxx"}) || out.Stats().Shrunk != 1 {
		t.Fatalf("records %q, shrunk %d", got, out.Stats().Shrunk)
	}
}

package redisstream_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// failing is a sink that fails every message whose index is odd, with
// reason; transient marks the failures as transient (to be parked).
func failing(reason string, transient bool) stream.Sink[[]byte] {
	return stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil // the end of the input (or the drain)
			}
			for i := range b.Items {
				m := &b.Items[i]
				if len(m.Value) > 16 || indexOf(m.Value)%2 == 1 {
					if err := in.FailWith(ctx, *m, stream.Failure{Err: errors.New(reason), Transient: transient}); err != nil {
						return err
					}
					continue
				}
				in.Settle(m, stream.Completed)
			}
			b.Release()
		}
	})
}

// producer is a Producer of the server at addr, closed when the test ends.
func producer(t *testing.T, addr string, opts ...redisstream.Option) *redisstream.Producer {
	p := redisstream.NewProducer(newClient(t, addr), opts...)
	t.Cleanup(p.Close)
	return p
}

func TestProducerUnderDeadLetter(t *testing.T) {
	addr := testenv.Redis(t)
	dead := freshStream("dead-letters")
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, numbered(tr, 0, 10)), failing("cannot parse", false), stream.Name("parse"))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(producer(t, addr), dead))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 5 || st.Settled[stream.DeadLettered] != 5 || st.Duplicates != 0 {
		t.Fatalf("settled %+v, want 5 completed and 5 dead-lettered", st)
	}
	rs := records(t, readStream(t, newClient(t, addr), dead))
	if len(rs) != 5 {
		t.Fatalf("%d dead letters, want 5", len(rs))
	}
	for i, r := range rs {
		if want := 2*i + 1; indexOf(r.Value) != want {
			t.Fatalf("dead letter %d holds %s, want v%d", i, r.Value, want)
		}
		if header(r, kafkasink.HeaderReason) != "cannot parse" || header(r, kafkasink.HeaderStage) != "parse" ||
			header(r, kafkasink.HeaderAttempt) != "0" || header(r, kafkasink.HeaderFailedAt) == "" {
			t.Fatalf("dead letter %d has headers %v, want the failure's", i, r.Headers)
		}
	}
}

func TestProducerUnderParkingFunc(t *testing.T) {
	addr := testenv.Redis(t)
	park := freshStream("parked")
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, numbered(tr, 0, 6)), failing("service unavailable", true), stream.Name("call"))
	after := func(m *stream.Message[stream.Failure]) time.Duration { return time.Minute }
	before := time.Now()
	stream.To(g.Failures(), kafkasink.NewParkingFunc(producer(t, addr), park, after))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != 3 || st.Settled[stream.Completed] != 3 {
		t.Fatalf("settled %+v, want 3 parked and 3 completed", st)
	}
	rs := records(t, readStream(t, newClient(t, addr), park))
	if len(rs) != 3 {
		t.Fatalf("%d parked, want 3", len(rs))
	}
	for _, r := range rs {
		at, err := time.Parse(time.RFC3339Nano, header(r, kafkasink.HeaderReplayAt))
		if err != nil || at.Before(before.Add(time.Minute)) {
			t.Fatalf("replay at %q (%v), want a minute from the parking", header(r, kafkasink.HeaderReplayAt), err)
		}
		if header(r, kafkasink.HeaderParkings) != "1" || header(r, kafkasink.HeaderReason) != "service unavailable" ||
			header(r, kafkasink.HeaderStage) != "call" {
			t.Fatalf("parked record with headers %v, want its first parking's", r.Headers)
		}
	}
}

func TestOversizeDeadLetterIsWrittenSmaller(t *testing.T) {
	addr := testenv.Redis(t)
	dead := freshStream("dead-letters")
	big, huge := bytes.Repeat([]byte("b"), 2500), bytes.Repeat([]byte("h"), 5000)
	tr := stream.NewTracker(0)
	var log testenv.Buffer
	g := stream.New(stream.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, v := range [][]byte{big, huge} {
			m := stream.NewMessage(v, tr.Track())
			m.Headers = []stream.Header{{Key: "trace", Value: []byte("t-1")}}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	stream.To(stream.From(g, src), failing("cannot parse", false), stream.Name("parse"))
	dl := kafkasink.NewDeadLetter(producer(t, addr, redisstream.MaxBytes(2000)), dead)
	stream.To(g.Failures(), dl)
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil: a dead letter too large is written smaller", err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("settled %+v, want both dead-lettered", st)
	}
	rs := records(t, readStream(t, newClient(t, addr), dead))
	if len(rs) != 2 {
		t.Fatalf("%d dead letters, want 2", len(rs))
	}
	byFirst := map[byte]int{}
	for i, r := range rs {
		switch {
		case len(r.Value) > 0:
			byFirst[r.Value[0]] = i
		default:
			byFirst[0] = i
		}
	}
	// The value of 2500 bytes is written cut to half, with its headers.
	tb := rs[byFirst['b']]
	if len(tb.Value) != 1250 || header(tb, kafkasink.HeaderTruncated) != "true" ||
		header(tb, kafkasink.HeaderOriginalSize) != "2500" || header(tb, "trace") != "t-1" {
		t.Fatalf("dead letter of the 2500-byte value: %d bytes, headers %v; want 1250 bytes, truncated, with its headers", len(tb.Value), tb.Headers)
	}
	// Half of 5000 bytes is still over MaxBytes: headers only.
	th := rs[byFirst[0]]
	if len(th.Value) != 0 || header(th, kafkasink.HeaderHeadersDropped) != "1" ||
		header(th, kafkasink.HeaderOriginalSize) != strconv.Itoa(len(huge)) || header(th, kafkasink.HeaderReason) != "cannot parse" {
		t.Fatalf("dead letter of the 5000-byte value: %d bytes, headers %v; want headers only", len(th.Value), th.Headers)
	}
	if s := dl.Stats(); s.Shrunk != 2 {
		t.Fatalf("dead letter stats %+v, want 2 shrunk", s)
	}
	// The Producer measures each record alone: no batch of Kafka's was
	// refused whole, and the dead letter must not say one was.
	if strings.Contains(log.String(), "batch was refused") {
		t.Fatalf("the dead letter warned of a batch refused whole:\n%s", log.String())
	}
}

func TestProducerRecordOutcomes(t *testing.T) {
	addr := testenv.Redis(t)
	p := redisstream.NewProducer(newClient(t, addr), redisstream.MaxBytes(100))
	name := freshStream("produced")
	errs := make([]error, 4)
	ctx := context.Background()
	for i, r := range []*kgo.Record{
		{Topic: name, Value: []byte("one")},
		{Topic: name, Value: bytes.Repeat([]byte("x"), 200)},
		{Value: []byte("no topic")},
		{Topic: name, Key: []byte("k"), Value: []byte("two"), Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}}},
	} {
		p.Produce(ctx, r, func(_ *kgo.Record, err error) { errs[i] = err })
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("outcomes %v, want the small records written", errs)
	}
	if !errors.Is(errs[1], kerr.MessageTooLarge) || !errors.Is(errs[1], redisstream.ErrTooLarge) {
		t.Fatalf("record over MaxBytes failed with %v, want kerr.MessageTooLarge and ErrTooLarge", errs[1])
	}
	if !errors.Is(errs[2], kafkasink.ErrUnproducible) {
		t.Fatalf("record without topic failed with %v, want ErrUnproducible", errs[2])
	}
	rs := records(t, readStream(t, newClient(t, addr), name))
	if len(rs) != 2 || string(rs[1].Key) != "k" || header(rs[1], "a") != "1" {
		t.Fatalf("stream holds %+v, want the two small records with key and header", rs)
	}
	p.Close()
	var closed error
	p.Produce(ctx, &kgo.Record{Topic: name, Value: []byte("late")}, func(_ *kgo.Record, err error) { closed = err })
	if !errors.Is(closed, redisstream.ErrClosed) {
		t.Fatalf("record produced after Close failed with %v, want ErrClosed", closed)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush after Close = %v", err)
	}
}

// The Kafka sinks' spans name Redis as the system a Producer writes to.
func TestProducerSaysItWritesToRedis(t *testing.T) {
	p := redisstream.NewProducer(outageClient(t, "127.0.0.1:1"))
	defer p.Close()
	if s := kafkasink.MessagingSystem(p); s != "redis" {
		t.Errorf("MessagingSystem = %q, want redis", s)
	}
}

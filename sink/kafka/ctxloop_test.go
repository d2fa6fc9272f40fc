package kafka_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// runFatal runs one message through a sink and wants Run to end with a
// fatal error, the message unsettled, well before the test's patience.
func runFatal(t *testing.T, snk *kafkasink.Sink[[]byte]) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, source.Slice([][]byte{[]byte("a")}, source.Track(tr))), snk, stream.Name("out"))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	err := g.Run(ctx)
	if ctx.Err() != nil || !stream.IsFatal(err) {
		t.Fatalf("Run = %v (ctx %v), want a fatal error before the deadline; %+v", err, ctx.Err(), snk.Stats())
	}
	if tr.Stats().Total() != 0 {
		t.Fatalf("settled %+v: the message must stay unsettled", tr.Stats().Settled)
	}
	t.Log(err)
}

// A dial timeout is a net error that errors.Is context.DeadlineExceeded
// (net's errTimeout). A broker out of reach is not another user's
// cancellation: with a delivery timeout the pipeline ends, as before,
// instead of the record being produced again every RecordDeliveryTimeout.
// (franz-go fails it here with a bare ErrRecordTimeout: the metadata's
// dial errors do not reach it.)
func TestUnreachableBrokerWithDeliveryTimeoutIsFatal(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	cl := client(t, brokers, kgo.DialTimeout(time.Nanosecond), kgo.RecordDeliveryTimeout(time.Second))
	runFatal(t, kafkasink.NewSink(cl, kafkasink.Records("out")))
}

// A broker whose advertised address cannot be dialed (dials time out)
// while the seed answered the topic's metadata: franz-go fails
// the records with the producer ID's load error, which wraps the dial
// timeout, once they used their RecordRetries. The client was told not to
// retry; the sink must not either.
func TestDialTimeoutForProducerIDIsFatal(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var unreachable atomic.Bool
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		unreachable.Store(true) // from the next dial on: the seed's connection stays
		return nil, nil, false
	})
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		if !unreachable.Load() {
			return (&net.Dialer{}).DialContext(ctx, network, host)
		}
		return (&net.Dialer{Timeout: time.Nanosecond}).DialContext(ctx, network, host)
	}
	cl := client(t, c.ListenAddrs(), kgo.Dialer(dial), kgo.RecordRetries(0), kgo.RequestRetries(0))
	s := kafkasink.NewSink(cl, kafkasink.Records("out"))
	runFatal(t, s)
	if st := s.Stats(); st.Failed != 1 {
		t.Fatalf("%+v: the record that failed was produced again", st)
	}
}

// franz-go fails a record whose own Context (kgo.Record.Context, set by
// the Encoder) ended. Producing it again fails it again, at once: the
// sink's ctx being alive says nothing about that one.
func TestRecordsOwnEndedContextIsFatal(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	cl := client(t, brokers)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	enc := func(m *stream.Message[[]byte]) (*kgo.Record, error) {
		return &kgo.Record{Topic: "out", Value: m.Value, Context: ended}, nil
	}
	s := kafkasink.NewSink(cl, enc)
	runFatal(t, s)
	t.Log(s.Stats())
}

// A client closed while the sink runs fails its records with
// ErrClientClosed: the sink ends, it does not produce again.
func TestClientClosedWhileRunningIsFatal(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	cl := client(t, brokers)
	tr := stream.NewTracker(0)
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for i := 0; ; i++ {
			if err := out.Send(ctx, stream.NewMessage([]byte("x"), tr.Track())); err != nil {
				return err
			}
			if i == 100 {
				go cl.Close()
			}
		}
	})
	stream.To(stream.From(g, src), kafkasink.NewSink(cl, kafkasink.Records("out")), stream.Name("out"))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	err := g.Run(ctx)
	if ctx.Err() != nil || !errors.Is(err, kgo.ErrClientClosed) {
		t.Fatalf("Run = %v (ctx %v), want ErrClientClosed before the deadline", err, ctx.Err())
	}
	t.Log(err, tr.Stats())
}

package redisstream_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// ackFailer fails, while armed, every round trip carrying an XACK, as a
// lost connection would, and counts them.
type ackFailer struct {
	armed  atomic.Bool
	failed atomic.Int64
}

func (h *ackFailer) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ackFailer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *ackFailer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "xack" && h.armed.Load() {
				h.failed.Add(1)
				return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
			}
		}
		return next(ctx, cmds)
	}
}

// drainThenSettle runs src in a pipeline whose sink keeps what arrives
// and settles it only once its input has ended (the source's Run has
// returned): a pipeline finishing its work in hand while it stops. It
// reports on arrived when n messages have arrived.
func drainThenSettle(ctx context.Context, src stream.Source[[]byte], n int, arrived chan<- struct{}) chan error {
	g := stream.New(stream.WithDrainTimeout(20 * time.Second))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		var held []stream.Message[[]byte]
		for {
			b, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				in.SettleAll(held, stream.Completed)
				return nil
			}
			if err != nil {
				return err
			}
			held = append(held, b.Items...)
			b.Release()
			if len(held) == n {
				arrived <- struct{}{}
			}
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return done
}

// Entries a stopping pipeline settled while their acknowledgement could
// not be sent (the connection lost at that moment) stay held, to be
// acknowledged by the next round trip. The source run again in a new
// pipeline sends it: with MaxInFlight of them held and nothing else in
// flight, no new settle would ever come to trigger it, the source would
// have no room to read, and the entries would be renewed, never
// acknowledged, for as long as it runs.
func TestSettledEntriesLeftUnacknowledgedAreAcknowledgedByTheNextRun(t *testing.T) {
	addr := testenv.Redis(t)
	c := client(t, addr)
	produce(t, c, "acks", 0, 2)
	hooked := client(t, addr)
	fail := &ackFailer{}
	hooked.AddHook(fail)
	src := newSource(t, redisstream.Config{Client: hooked, Streams: []string{"acks"}, Group: "g", Consumer: "c", Create: true,
		MaxInFlight: 2, MinIdle: time.Hour, ClaimEvery: time.Hour, Block: 20 * time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	arrived := make(chan struct{}, 1)
	done := drainThenSettle(ctx, src, 2, arrived)
	<-arrived
	fail.armed.Store(true)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first Run = %v", err)
	}
	waitFor(t, "the acknowledgement of the settled entries to be tried", func() bool { return fail.failed.Load() > 0 })
	fail.armed.Store(false)

	produce(t, c, "acks", 2, 1)
	second := run(t, src, true)
	second.await(t, "the entry produced after the first pipeline stopped", count(1))
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "acks", "g")) == 0 })
}

// A source whose Run ended with ErrOutage, run again once Redis is back
// (a supervisor restarting the pipeline), reads: the outage of the last
// Run is over, and the new Run neither ends at once with it nor leaves
// Ready failing.
func TestRunAgainAfterAnOutageReads(t *testing.T) {
	srv := testenv.StartDurableRedis(t)
	c := client(t, srv.Addr)
	produce(t, c, "payments", 0, 1)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"payments"}, Group: "g", Consumer: "c", Create: true,
		MaxOutage: 300 * time.Millisecond, Block: 50 * time.Millisecond})
	first := run(t, src, true)
	first.await(t, "the first entry", count(1))
	srv.Stop()
	if err := <-first.done; !errors.Is(err, redisstream.ErrOutage) {
		t.Fatalf("first Run = %v, want ErrOutage", err)
	}
	first.done <- nil
	srv.Start()
	produce(t, c, "payments", 1, 1)

	second := run(t, src, true)
	second.await(t, "the entry produced once Redis was back", count(1))
	waitFor(t, "Ready to pass again", func() bool { return src.Ready(t.Context()) == nil })
}

// A consumer's pending list whose last page ends at the largest entry ID
// there is (an ID a producer may give, after which the stream takes no
// more) is through: the re-read does not start over from the smallest ID
// for ever, and the source goes on to read new entries.
func TestPendingPagesEndAtTheLargestID(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	for _, id := range []string{"1-0", "18446744073709551615-18446744073709551615"} {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "last", ID: id, Values: []any{"value", id}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.XGroupCreate(ctx, "last", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// An earlier instance of the consumer read both and stopped.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"last", ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "next", 0, 1)
	if err := c.XGroupCreate(ctx, "next", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"last", "next"}, Group: "g", Consumer: "c",
		MaxBatch: 1, MinIdle: time.Hour, Block: 20 * time.Millisecond})
	r := run(t, src, false) // held, so still pending: the pages see them
	r.await(t, "both pending entries and the new one", count(3))
}

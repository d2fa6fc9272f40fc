package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// settled records which messages were settled, and how often.
type settled struct {
	mu    sync.Mutex
	times map[int64]int
}

func (s *settled) Settle(id int64, o stream.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.times == nil {
		s.times = map[int64]int{}
	}
	s.times[id]++
}

func (s *settled) count() (ids, twice int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.times {
		if n > 1 {
			twice++
		}
	}
	return len(s.times), twice
}

func (s *settled) has(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[id] > 0
}

// halves is a source of v0..v<n-1> settled through st: it sends the first
// half, waits until all of it is settled, closes sentHalf, waits for go
// and sends the rest.
func halves(st *settled, n int, sentHalf chan<- struct{}, goOn <-chan struct{}) stream.Source[[]byte] {
	return stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for i := range n {
			if i == n/2 {
				if err := out.Flush(ctx); err != nil {
					return err
				}
				for ids, _ := st.count(); ids < n/2; ids, _ = st.count() {
					if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
						return err
					}
				}
				close(sentHalf)
				select {
				case <-goOn:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := out.Send(ctx, stream.NewMessage(fmt.Appendf(nil, "v%d", i), stream.NewHandle(st, int64(i)))); err != nil {
				return err
			}
		}
		return nil
	})
}

// outageClient is a client of addr without retries of its own, so that
// what a test sees of an outage is the sink's retrying.
func outageClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestServerBackWithinRetryForGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out a redis-server outage of a second")
	}
	srv := testenv.StartDurableRedis(t)
	c := outageClient(t, srv.Addr)
	name := freshStream("outage")
	const n = 2000
	st := &settled{}
	sentHalf, goOn := make(chan struct{}), make(chan struct{})
	snk := redisstream.NewSink(c, name, redisstream.Values, redisstream.RetryFor(30*time.Second))
	g := stream.New()
	stream.To(stream.From(g, halves(st, n, sentHalf, goOn)), snk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	select {
	case <-sentHalf:
	case err := <-done:
		t.Fatalf("Run = %v before the outage", err)
	}
	srv.Stop()
	close(goOn)
	time.Sleep(time.Second) // the outage: the second half waits for the server
	if ids, _ := st.count(); ids != n/2 {
		t.Fatalf("%d messages settled while the server was down, want the %d written before", ids, n/2)
	}
	srv.Start()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil: the server came back within RetryFor", err)
	}
	if ids, twice := st.count(); ids != n || twice != 0 {
		t.Fatalf("%d messages settled (%d twice), want all %d once", ids, twice, n)
	}
	seen := map[int]bool{}
	for _, r := range records(t, readStream(t, c, name)) {
		seen[indexOf(r.Value)] = true
	}
	if len(seen) != n {
		t.Fatalf("the stream holds %d of the %d values", len(seen), n)
	}
	if s := snk.Stats(); s.Retries == 0 {
		t.Fatalf("stats %+v: no retry counted across the outage", s)
	}
}

func TestServerGoneLongerThanRetryForIsFatal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out RetryFor (1 s) against a stopped redis-server")
	}
	srv := testenv.StartDurableRedis(t)
	c := outageClient(t, srv.Addr)
	name := freshStream("gone")
	const n = 1000
	st := &settled{}
	sentHalf, goOn := make(chan struct{}), make(chan struct{})
	g := stream.New()
	stream.To(stream.From(g, halves(st, n, sentHalf, goOn)), redisstream.NewSink(c, name, redisstream.Values, redisstream.RetryFor(time.Second)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	<-sentHalf
	srv.Stop()
	close(goOn)
	err := <-done
	if !errors.Is(err, redisstream.ErrUnreachable) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Run = %v, want ErrUnreachable naming %s", err, srv.Addr)
	}
	t.Logf("Run = %v", err)
	// Nothing settled that was not written: every settled message is in
	// the stream (read once the server is back with its data).
	srv.Start()
	inStream := map[int64]bool{}
	for _, r := range records(t, readStream(t, c, name)) {
		inStream[int64(indexOf(r.Value))] = true
	}
	ids, twice := st.count()
	if ids < n/2 || ids == n || twice != 0 {
		t.Fatalf("%d messages settled (%d twice), want the %d of the first half and not all %d", ids, twice, n/2, n)
	}
	for i := range int64(n) {
		if st.has(i) && !inStream[i] {
			t.Fatalf("v%d was settled but is not in the stream", i)
		}
	}
}

// A Producer under a Kafka dead letter: Redis gone past RetryFor ends the
// pipeline with the error naming the address, and the failures not
// written stay unsettled.
func TestProducerServerGoneIsFatal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out RetryFor (1 s) against a stopped redis-server")
	}
	srv := testenv.StartDurableRedis(t)
	p := redisstream.NewProducer(outageClient(t, srv.Addr), redisstream.RetryFor(time.Second))
	t.Cleanup(p.Close)
	srv.Stop()
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, numbered(tr, 0, 10)), failing("cannot parse", false), stream.Name("parse"))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(p, freshStream("dead-letters")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := g.Run(ctx)
	if !errors.Is(err, redisstream.ErrUnreachable) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Run = %v, want ErrUnreachable naming %s", err, srv.Addr)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 0 {
		t.Fatalf("settled %+v: a failure was settled as dead-lettered though nothing was written", st)
	}
}

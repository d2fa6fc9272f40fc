package redisstream_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// client returns a client of the server at addr, closed when the test
// ends.
func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// produce adds n entries with values "first" ... "first+n-1".
func produce(t *testing.T, c redis.UniversalClient, name string, first, n int) {
	t.Helper()
	ctx := context.Background()
	for from := first; from < first+n; from += 500 {
		p := c.Pipeline()
		for i := from; i < min(from+500, first+n); i++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: redisentry.AppendFields(nil, "", nil, []byte(strconv.Itoa(i)), nil)})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatalf("producing to %s: %v", name, err)
		}
	}
}

func index(v []byte) int {
	i, err := strconv.Atoi(string(v))
	if err != nil {
		return -1
	}
	return i
}

// newSource returns a source of cfg, Closed when the test ends.
func newSource(t *testing.T, cfg redisstream.Config) *redisstream.Source {
	t.Helper()
	src, err := redisstream.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = src.Close(ctx)
	})
	return src
}

// running is a source in a pipeline of its own whose sink hands every
// message to got.
type running struct {
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	got    []stream.Message[[]byte]
	more   chan struct{}
}

// run runs src into a sink that keeps each message and, if settle, settles
// it at once. The pipeline is stopped when the test ends.
func run(t *testing.T, src stream.Source[[]byte], settle bool) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), more: make(chan struct{}, 1)}
	g := stream.New(stream.WithDrainTimeout(5 * time.Second))
	stream.To(stream.From(g, src, stream.Name("redis")), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			for i := range b.Items {
				if settle {
					in.Settle(&b.Items[i], stream.Completed)
				}
				r.mu.Lock()
				r.got = append(r.got, b.Items[i])
				r.mu.Unlock()
			}
			b.Release()
			select {
			case r.more <- struct{}{}:
			default:
			}
		}
	}))
	go func() { r.done <- g.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop cancels the pipeline and waits for its end (once).
func (r *running) stop() {
	r.cancel()
	if err, ok := <-r.done; ok {
		r.done <- err
	}
}

// received returns a copy of what arrived so far.
func (r *running) received() []stream.Message[[]byte] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stream.Message[[]byte](nil), r.got...)
}

// await waits, 30 s at most, until cond holds for what arrived.
func (r *running) await(t *testing.T, what string, cond func(got []stream.Message[[]byte]) bool) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		if cond(r.received()) {
			return
		}
		select {
		case <-r.more:
		case <-time.After(20 * time.Millisecond):
		case err := <-r.done:
			r.done <- err
			if !cond(r.received()) {
				t.Fatalf("the pipeline ended (%v) before %s", err, what)
			}
			return
		case <-deadline.C:
			t.Fatalf("waited 30 s for %s: %d messages arrived", what, len(r.received()))
		}
	}
}

type streamMsg = stream.Message[[]byte]

// count returns a condition: at least n messages arrived.
func count(n int) func([]stream.Message[[]byte]) bool {
	return func(got []stream.Message[[]byte]) bool { return len(got) >= n }
}

// waitFor polls cond, 30 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainAll calls fn for every message until the input ends.
func drainAll(ctx context.Context, in *stream.Inlet[[]byte], fn func(m *stream.Message[[]byte])) error {
	for {
		b, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range b.Items {
			fn(&b.Items[i])
		}
		b.Release()
	}
}

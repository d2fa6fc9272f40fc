package delivery

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// stallProxy stands between a client and a Redis (to) and forwards both
// ways until stalled: from then on it reads what either side sends and
// forwards nothing, a server that takes requests and never answers. With
// to empty it is stalled from the start and dials nothing. close ends
// every connection, which is how a test lets a stuck read go.
type stallProxy struct {
	ln      net.Listener
	to      string
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startStallProxy(t *testing.T, to string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, to: to}
	p.stalled.Store(to == "")
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall() { p.stalled.Store(true) }

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		var up net.Conn
		if p.to != "" {
			if up, err = net.Dial("tcp", p.to); err != nil {
				c.Close()
				continue
			}
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		if up != nil {
			p.conns = append(p.conns, up)
		}
		p.mu.Unlock()
		if up == nil {
			p.wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
			continue
		}
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies from to dst until either ends, dropping what it reads once
// stalled.
func (p *stallProxy) pipe(dst, from net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.stalled.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// within runs f on its own goroutine and reports whether it returned
// within limit; f goes on running if not.
func within(limit time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// closeWithin closes s, failing the test if Close does not return within
// 10 s: the store would keep the worker from ever stopping.
func closeWithin(t *testing.T, s *RedisSteps) {
	t.Helper()
	if !within(10*time.Second, s.Close) {
		t.Error("Close of the step store did not return in 10 s")
	}
}

// A client whose reads wait without a limit (ReadTimeout -1 or -2), and a
// Redis that takes requests and never answers: every step operation's
// caller still stops waiting when its context ends, as it did when the
// batchers' goroutines sent every operation. Found in review: the
// operation whose batcher had nothing in flight was sent by its caller,
// who then waited for a reply that never came, whatever its context said
// — the drone step of that request wedged for good.
func TestStepsWithUnboundedReadsLeaveAtContextEnd(t *testing.T) {
	for _, rt := range []time.Duration{-1, -2} {
		p := startStallProxy(t, "")
		cl := redis.NewClient(&redis.Options{Addr: p.addr(), ReadTimeout: rt})
		s := NewRedisSteps(cl, time.Minute)
		ops := []func(ctx context.Context, i int) error{
			func(ctx context.Context, i int) error {
				_, err := s.Begin(ctx, "hung-"+string(rune('a'+i)), StepDrone, "m")
				return err
			},
			func(ctx context.Context, i int) error {
				return s.Record(ctx, "hung-"+string(rune('a'+i)), StepDrone, "drone")
			},
			func(ctx context.Context, i int) error {
				return s.Abandon(ctx, "hung-"+string(rune('a'+i)), StepDrone, "m")
			},
		}
		for i := range 12 { // every batcher: at least one operation of each is its first
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			var err error
			if !within(10*time.Second, func() { err = ops[i%len(ops)](ctx, i) }) {
				cancel()
				p.close()
				closeWithin(t, s)
				cl.Close()
				t.Fatalf("ReadTimeout %v, operation %d: its context ended after 200 ms and it still waited 10 s later", rt, i)
			}
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("ReadTimeout %v, operation %d: %v, want its context's end", rt, i, err)
			}
		}
		p.close() // lets the round trips held go
		closeWithin(t, s)
		cl.Close()
	}
}

// A scheduler whose Redis client reads without a limit still ends a long
// step store outage (a Redis that takes requests and never answers) with
// ErrStoreOutage after MaxStoreOutage, before its call (Begin) and after
// it (Record): the recorded step does not wait for the store for ever.
func TestStoreOutageEndsWithUnboundedReads(t *testing.T) {
	addr := testenv.Redis(t)
	outage := func(t *testing.T, p *stallProxy, r *recordedStep, s *RedisSteps, cl *redis.Client, attempt time.Duration) {
		t.Helper()
		defer cl.Close()
		defer closeWithin(t, s)
		defer p.close()
		prog := &Progress{Request: Request{ID: "outage"}}
		for try := range 200 {
			ctx, cancel := context.WithTimeout(context.Background(), attempt)
			var err error
			ok := within(20*time.Second, func() { err = r.run(ctx, prog) })
			cancel()
			if !ok {
				t.Fatalf("try %d: the recorded step still waited for the store 20 s later (MaxStoreOutage %v)", try, r.wait.limit)
			}
			if errors.Is(err, ErrStoreOutage) {
				if !stream.IsFatal(err) {
					t.Fatalf("try %d: %v, want it fatal", try, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("try %d: the step succeeded against a Redis that never answers", try)
			}
		}
		t.Fatal("200 tries and no ErrStoreOutage")
	}
	t.Run("before the call", func(t *testing.T) {
		p := startStallProxy(t, addr)
		p.stall()
		cl := redis.NewClient(&redis.Options{Addr: p.addr(), ReadTimeout: -1})
		s := NewRedisSteps(cl, time.Minute)
		d := &fakeDrone{acted: true, booked: map[string]bool{}}
		r := &recordedStep{store: s, wait: &storeWaiter{limit: 300 * time.Millisecond}, step: StepDrone, call: d.call,
			lookup: d.lookup, staleAfter: time.Hour}
		outage(t, p, r, s, cl, 200*time.Millisecond)
		if d.calls != 0 {
			t.Fatalf("%d calls with no mark written", d.calls)
		}
	})
	t.Run("after the call", func(t *testing.T) {
		p := startStallProxy(t, addr)
		cl := redis.NewClient(&redis.Options{Addr: p.addr(), ReadTimeout: -1})
		s := NewRedisSteps(cl, time.Minute)
		d := &fakeDrone{acted: true, booked: map[string]bool{}}
		r := &recordedStep{store: s, wait: &storeWaiter{limit: 300 * time.Millisecond}, step: StepDrone,
			call: func(ctx context.Context, pr *Progress) error {
				p.stall() // the drone is booked; its record cannot be written
				return d.call(ctx, pr)
			},
			lookup: d.lookup, staleAfter: time.Hour}
		outage(t, p, r, s, cl, 2*time.Second)
		if d.calls != 1 {
			t.Fatalf("%d calls, want 1", d.calls)
		}
	})
}

// The callers of a step store send their own operations only on a client
// whose round trips end within a limit whatever Redis does; on any other
// they hand them to the batchers' goroutines and can stop waiting.
func TestStepsSendTheirOwnOnlyWithBoundedRoundTrips(t *testing.T) {
	const addr = "127.0.0.1:1" // never dialled
	for _, c := range []struct {
		name  string
		cl    redis.UniversalClient
		bound bool
	}{
		{"defaults", redis.NewClient(&redis.Options{Addr: addr}), true},
		{"ReadTimeout 1s", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Second}), true},
		{"ReadTimeout -1", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1}), false},
		{"ReadTimeout -2", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -2}), false},
		{"WriteTimeout -1", redis.NewClient(&redis.Options{Addr: addr, WriteTimeout: -1}), false},
		{"ReadTimeout -1, ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, ContextTimeoutEnabled: true}), true},
		{"ReadTimeout -2, ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -2, ContextTimeoutEnabled: true}), false},
		{"cluster defaults", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), true},
		{"cluster ReadTimeout -1", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ReadTimeout: -1}), false},
		{"cluster ReadTimeout -2", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ReadTimeout: -2}), false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}), false},
	} {
		if got := boundedRoundTrips(c.cl); got != c.bound {
			t.Errorf("%s: bounded round trips %v, want %v", c.name, got, c.bound)
		}
		c.cl.Close()
	}
}

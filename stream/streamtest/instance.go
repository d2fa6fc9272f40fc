package streamtest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// patience bounds every wait of the restart checks: a connector that
// needs longer to deliver a few hundred messages, rejoin its group or
// reconnect is broken, not slow.
const patience = time.Minute

// instance is one instance of a resumable source, running in a pipeline
// of its own whose sink keeps every message it receives and, if told to,
// settles it at once.
type instance[T any] struct {
	src    Resumable[T]
	index  func(T) int
	cancel context.CancelFunc
	ended  chan struct{} // closed when Run has returned, with err set
	err    error
	closed bool

	mu      sync.Mutex
	got     []stream.Message[T] // in arrival order
	changed chan struct{}       // closed, and replaced, at each arrival
}

// start builds a new instance with rc.NewSource and runs it. If the test
// ends before stop is called, a cleanup stops it.
func start[T any](t *testing.T, rc RestartCase[T], index func(T) int, settle bool) *instance[T] {
	t.Helper()
	in := &instance[T]{src: rc.NewSource(t), index: index, ended: make(chan struct{}), changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	g := stream.New(stream.WithDrainTimeout(10 * time.Second))
	stream.To(stream.From(g, in.src), stream.SinkFunc[T](func(ctx context.Context, inlet *stream.Inlet[T]) error {
		return drain(ctx, inlet, func(m *stream.Message[T]) {
			if settle {
				inlet.Settle(m, stream.Completed)
			}
			in.mu.Lock()
			in.got = append(in.got, *m)
			close(in.changed)
			in.changed = make(chan struct{})
			in.mu.Unlock()
		})
	}))
	go func() {
		defer close(in.ended)
		in.err = g.Run(ctx)
	}()
	t.Cleanup(func() {
		if !in.closed {
			cancel()
			<-in.ended
			closeSource(t, in.src)
		}
	})
	return in
}

// await waits until cond holds for the messages received so far (it is
// called with them, in arrival order, after each arrival), and fails the
// test if the pipeline ends or patience runs out first.
func (in *instance[T]) await(t *testing.T, what string, cond func(got []stream.Message[T]) bool) {
	t.Helper()
	timeout := time.NewTimer(patience)
	defer timeout.Stop()
	for {
		in.mu.Lock()
		ok, changed, n := cond(in.got), in.changed, len(in.got)
		in.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-in.ended:
			t.Fatalf("Run = %v before %s (%d messages received)", in.err, what, n)
		case <-timeout.C:
			t.Fatalf("waited %v for %s: %d messages received", patience, what, n)
		}
	}
}

// received returns a copy of the messages received so far, in arrival
// order.
func (in *instance[T]) received() []stream.Message[T] {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]stream.Message[T](nil), in.got...)
}

// counts returns how many times each index has arrived.
func (in *instance[T]) counts() map[int]int {
	c := map[int]int{}
	for _, m := range in.received() {
		c[in.index(m.Value)]++
	}
	return c
}

// commit commits through the source's Committer while the pipeline runs.
func (in *instance[T]) commit(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := in.src.Commit(ctx); err != nil {
		t.Fatalf("Commit = %v", err)
	}
}

// stop cancels the pipeline, checks that Run ended well, and closes the
// source.
func (in *instance[T]) stop(t *testing.T) {
	t.Helper()
	in.cancel()
	<-in.ended
	in.closed = true
	if in.err != nil {
		closeSource(t, in.src)
		t.Fatalf("Run after cancel = %v, want nil", in.err)
	}
	if err := closeSource(t, in.src); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

func closeSource[T any](t *testing.T, src Resumable[T]) error {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	return src.Close(ctx)
}

// hasAll returns a condition of await: every index in [from, to) arrived.
func hasAll[T any](index func(T) int, from, to int) func([]stream.Message[T]) bool {
	return func(got []stream.Message[T]) bool {
		seen := make(map[int]bool, to-from)
		for i := range got {
			if x := index(got[i].Value); x >= from && x < to {
				seen[x] = true
			}
		}
		return len(seen) == to-from
	}
}

// describe lists up to ten indexes of a set, for failure messages.
func describe(idx map[int]bool) string {
	var s []int
	for i := range idx {
		s = append(s, i)
	}
	sort.Ints(s)
	if len(s) > 10 {
		return fmt.Sprintf("%v and %d more", s[:10], len(s)-10)
	}
	return fmt.Sprint(s)
}

package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/stream"
)

var quiet = slog.New(slog.DiscardHandler)

// fakeSource is a Partitioned source that emits nothing: it records which
// partitions run, from where, and reports as settled whatever the test
// says it processed.
type fakeSource struct {
	mu      sync.Mutex
	parts   []int32
	running map[int32]int64 // partition -> offset started at
	settled map[int32]int64
	starts  []string
}

func newFake(n int) *fakeSource {
	f := &fakeSource{running: map[int32]int64{}, settled: map[int32]int64{}}
	for p := range n {
		f.parts = append(f.parts, int32(p))
	}
	return f
}

func (f *fakeSource) Run(ctx context.Context, _ *stream.Outlet[int]) error {
	<-ctx.Done()
	return nil
}

func (f *fakeSource) Partitions(context.Context) ([]int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.parts), nil
}

func (f *fakeSource) Start(p int32, off int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[p] = off
	delete(f.settled, p)
	f.starts = append(f.starts, fmt.Sprintf("%d@%d", p, off))
}

func (f *fakeSource) Stop(p int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, p)
	delete(f.settled, p)
}

func (f *fakeSource) Settled(p int32) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off, ok := f.settled[p]
	if _, run := f.running[p]; !run {
		return -1, false
	}
	return off, ok
}

// process marks partition p processed up to off, if it runs here.
func (f *fakeSource) process(p int32, off int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[p]; ok {
		f.settled[p] = off
	}
}

func (f *fakeSource) owned() []int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ps []int32
	for p := range f.running {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (f *fakeSource) startedAt(p int32) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off, ok := f.running[p]
	return off, ok
}

// view is one member's connection to a shared memStore: cut makes its
// calls fail (the store unreachable from this member only).
type view struct {
	*memStore
	mu    sync.Mutex
	cut   bool
	delay time.Duration // of each Claim and Checkpoints call (a slow store)
}

func (v *view) err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cut {
		return errDown
	}
	return nil
}

// slow waits for the view's delay, or until ctx ends.
func (v *view) slow(ctx context.Context) error {
	v.mu.Lock()
	d := v.delay
	v.mu.Unlock()
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *view) Checkpoints(ctx context.Context, ps []int32) ([]ownership.Checkpoint, error) {
	if err := v.slow(ctx); err != nil {
		return nil, err
	}
	return v.memStore.Checkpoints(ctx, ps)
}

func (v *view) setCut(c bool) { v.mu.Lock(); v.cut = c; v.mu.Unlock() }

func (v *view) Renew(ctx context.Context, o string, ps []int32, h []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	if err := v.err(); err != nil {
		return ownership.Table{}, nil, err
	}
	return v.memStore.Renew(ctx, o, ps, h)
}

func (v *view) RenewSince(ctx context.Context, o string, ps []int32, h []ownership.Lease, since int64) (ownership.Table, []ownership.Outcome, error) {
	if err := v.err(); err != nil {
		return ownership.Table{}, nil, err
	}
	return v.memStore.RenewSince(ctx, o, ps, h, since)
}

func (v *view) Claim(ctx context.Context, o string, c []ownership.Claim) ([]ownership.Lease, error) {
	if err := v.err(); err != nil {
		return nil, err
	}
	if err := v.slow(ctx); err != nil {
		return nil, err
	}
	return v.memStore.Claim(ctx, o, c)
}

func (v *view) Checkpoint(ctx context.Context, o string, w []ownership.Write) ([]ownership.Outcome, error) {
	if err := v.err(); err != nil {
		return nil, err
	}
	return v.memStore.Checkpoint(ctx, o, w)
}

// member is one instance: a balancer over a fake source, running.
type member struct {
	id     string
	src    *fakeSource
	v      *view
	b      *ownership.Balancer[int]
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changes []ownership.Change
}

const (
	tInterval   = time.Second
	tExpiration = 3 * time.Second
)

// audit records every accepted checkpoint write by (partition, epoch), to
// prove that only one member's writes are ever accepted for one epoch.
type audit struct {
	mu  sync.Mutex
	by  map[[2]int64]map[string]bool
	bad []string
}

func (a *audit) record(id string) func(ownership.Write, ownership.Outcome) {
	return func(w ownership.Write, o ownership.Outcome) {
		if o != ownership.Accepted {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.by == nil {
			a.by = map[[2]int64]map[string]bool{}
		}
		k := [2]int64{int64(w.Partition), w.Epoch}
		if a.by[k] == nil {
			a.by[k] = map[string]bool{}
		}
		a.by[k][id] = true
		if len(a.by[k]) > 1 {
			a.bad = append(a.bad, fmt.Sprintf("partition %d epoch %d: writes accepted from %v", w.Partition, w.Epoch, a.by[k]))
		}
	}
}

func startMember(t *testing.T, s *memStore, a *audit, id string, n int, mut ...func(*ownership.Config)) *member {
	t.Helper()
	f := newFake(n)
	return startMemberOf(t, s, a, id, f, f, mut...)
}

// startMemberOf starts a member over src, which is f or wraps it.
func startMemberOf(t *testing.T, s *memStore, a *audit, id string, src ownership.Partitioned[int], f *fakeSource, mut ...func(*ownership.Config)) *member {
	t.Helper()
	m := &member{id: id, src: f, v: &view{memStore: s}, done: make(chan struct{})}
	cfg := ownership.Config{ID: id, Interval: tInterval, Logger: quiet,
		OnChange: func(c ownership.Change) { m.mu.Lock(); m.changes = append(m.changes, c); m.mu.Unlock() }}
	if a != nil {
		cfg.OnCheckpoint = a.record(id)
	}
	for _, f := range mut {
		f(&cfg)
	}
	b, err := ownership.NewBalancer[int](m.v, src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.b = b
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, stream.Source[int](b)), stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		_, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}))
	go func() { defer close(m.done); _ = g.Run(ctx) }()
	return m
}

// stopMember ends the member's pipeline and closes its balancer
// (graceful: final checkpoint, relinquish).
func (m *member) close(t *testing.T) {
	t.Helper()
	m.cancel()
	<-m.done
	if err := m.b.Close(context.Background()); err != nil {
		t.Fatalf("%s: Close: %v", m.id, err)
	}
}

// crash ends the member without Close, its store unreachable: as a
// process killed.
func (m *member) crash() {
	m.v.setCut(true)
	m.cancel()
	<-m.done
}

// ownedBy returns, per partition, the members whose source runs it.
func ownedBy(ms ...*member) map[int32][]string {
	o := map[int32][]string{}
	for _, m := range ms {
		for _, p := range m.src.owned() {
			o[p] = append(o[p], m.id)
		}
	}
	return o
}

// balanced reports whether every one of n partitions runs in exactly one
// member and each holds n/len(ms) or one more.
func balanced(n int, ms ...*member) error {
	o := ownedBy(ms...)
	for p := range int32(n) {
		if len(o[p]) != 1 {
			return fmt.Errorf("partition %d runs in %v", p, o[p])
		}
	}
	for _, m := range ms {
		if c := len(m.src.owned()); c < n/len(ms) || c > n/len(ms)+1 {
			return fmt.Errorf("%s holds %d of %d", m.id, c, n)
		}
	}
	return nil
}

// waitBalanced advances the fake clock round by round until balanced, at
// most limit rounds, and returns how many it took.
func waitBalanced(t *testing.T, limit int, n int, ms ...*member) int {
	t.Helper()
	for r := 0; r <= limit; r++ {
		synctest.Wait()
		if balanced(n, ms...) == nil {
			return r
		}
		time.Sleep(tInterval)
	}
	t.Fatalf("not balanced after %d intervals: %v", limit, balanced(n, ms...))
	return 0
}

func TestBalancerSharesTakesOverAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		s := newMemStore(tExpiration)
		var a audit
		ma := startMember(t, s, &a, "a", n)
		waitBalanced(t, 3, n, ma)
		mb, mc := startMember(t, s, &a, "b", n), startMember(t, s, &a, "c", n)
		waitBalanced(t, n/3+2, n, ma, mb, mc)
		// Settled: nothing moves over 20 intervals.
		before := s.claims()
		time.Sleep(20 * tInterval)
		synctest.Wait()
		if err := balanced(n, ma, mb, mc); err != nil || s.claims() != before {
			t.Fatalf("after 20 quiet intervals: %d claims (want 0), %v", s.claims()-before, err)
		}

		// Each processes, checkpoints; c leaves gracefully: its partitions
		// are relinquished and taken within an interval or two, from c's
		// final checkpoints.
		for _, m := range []*member{ma, mb, mc} {
			for _, p := range m.src.owned() {
				m.src.process(p, 100+int64(p))
				if err := m.b.Commit(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
		cParts := mc.src.owned()
		mc.src.process(cParts[0], 500) // settled after the last commit: Close writes it
		mc.close(t)
		if got := s.checkpoint(cParts[0]); got != 500 {
			t.Fatalf("c's final checkpoint of %d = %d, want 500", cParts[0], got)
		}
		for _, p := range cParts {
			if o, _ := s.owner(p); o != "" {
				t.Fatalf("partition %d still owned by %q after c closed", p, o)
			}
		}
		if r := waitBalanced(t, 2, n, ma, mb); r > 2 {
			t.Fatalf("took %d intervals", r)
		}
		for _, p := range cParts {
			want := 100 + int64(p)
			if p == cParts[0] {
				want = 500
			}
			var got int64 = -2
			for _, m := range []*member{ma, mb} {
				if off, ok := m.src.startedAt(p); ok {
					got = off
				}
			}
			if got != want {
				t.Errorf("partition %d restarted at %d, want c's checkpoint %d", p, got, want)
			}
		}

		// b crashes: its leases expire by the store's clock, and a takes
		// them within expiration + one interval (+ the jitter).
		bParts := mb.src.owned()
		mb.crash()
		crashed := time.Now()
		for len(ma.src.owned()) != n {
			if time.Since(crashed) > tExpiration+tInterval+tInterval/5 {
				t.Fatalf("a holds %v %v after b crashed", ma.src.owned(), time.Since(crashed))
			}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		// b self-fenced before its leases expired in the store.
		mb.mu.Lock()
		var fenced []int32
		for _, c := range mb.changes {
			if !c.Started && c.Reason == ownership.StopSelfFenced {
				fenced = append(fenced, c.Partition)
			}
		}
		mb.mu.Unlock()
		slices.Sort(fenced)
		if !slices.Equal(fenced, bParts) || len(mb.src.owned()) != 0 {
			t.Fatalf("b self-fenced %v, want %v; still runs %v", fenced, bParts, mb.src.owned())
		}
		ma.close(t)
		mb.b.Close(context.Background()) // its store is cut: errors expected, nothing to relinquish
		if len(a.bad) > 0 {
			t.Fatalf("two members' checkpoints accepted under one epoch: %v", a.bad)
		}
	})
}

// claims counts the claims the store granted (the epochs raised by claims
// and relinquishes), for "nothing moves".
func (s *memStore) claims() int64 { return s.EpochSum() }

// The self-fence deadline passes before the store expires the lease: an
// instance cut off from the store stops processing before another can
// claim its partitions, and resumes by itself when the store is back.
func TestBalancerSelfFencesBeforeTheLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		m := startMember(t, s, nil, "a", 4)
		waitBalanced(t, 3, 4, m)
		for p := range int32(4) {
			m.src.process(p, 10*int64(p+1))
		}
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.setDown(true)
		cut := time.Now()
		for len(m.src.owned()) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		fencedAfter := time.Since(cut)
		// The last renewal was sent at most one interval (+jitter) before
		// the cut; the lease runs from its arrival. The fence must come
		// before the store's expiration counted from the cut at the latest,
		// and not before expiration - margin - interval.
		if fencedAfter >= tExpiration || fencedAfter < tExpiration-tExpiration/5-tInterval-tInterval/5 {
			t.Fatalf("self-fenced %v after the store went down; want before the %v expiration, not earlier than one interval before the deadline", fencedAfter, tExpiration)
		}
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatalf("Commit with nothing held: %v", err)
		}
		if st := m.b.Stats(); st.SelfFences != 1 || st.Stops[ownership.StopSelfFenced] != 4 || len(st.Owned) != 0 || st.RenewFailures == 0 {
			t.Fatalf("stats after the self-fence: %+v", st)
		}
		time.Sleep(5 * tExpiration) // down for longer than the expiration
		s.setDown(false)
		waitBalanced(t, 3, 4, m)
		for p := range int32(4) {
			if off, _ := m.src.startedAt(p); off != 10*int64(p+1) {
				t.Errorf("partition %d resumed at %d, want its checkpoint %d", p, off, 10*(p+1))
			}
		}
		m.close(t)
	})
}

// A member whose partition was claimed by another (a steal it has not
// learnt of yet) has its next checkpoint refused, and stops at once.
func TestBalancerStopsOnARefusedCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		m := startMember(t, s, nil, "a", 2)
		waitBalanced(t, 3, 2, m)
		m.src.process(0, 7)
		// Someone else claims partition 0 behind a's back.
		tb, _, _ := s.Renew(context.Background(), "intruder", []int32{0}, nil)
		if won, _ := s.Claim(context.Background(), "intruder", []ownership.Claim{{Partition: 0, Version: tb.Owners[0].Version}}); len(won) != 1 {
			t.Fatal("the intruder's claim failed")
		}
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(m.src.owned(), 0) {
			t.Fatal("partition 0 still runs after its checkpoint was refused")
		}
		if s.checkpoint(0) != -1 {
			t.Fatalf("a refused checkpoint was recorded: %d", s.checkpoint(0))
		}
		m.close(t)
	})
}

// A rewind (SetCheckpoint) fences the owner's lease; the owner claims the
// partition again and resumes from the new checkpoint within an interval.
func TestBalancerResumesFromARewind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		m := startMember(t, s, nil, "a", 2)
		waitBalanced(t, 3, 2, m)
		m.src.process(1, 900)
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := s.SetCheckpoint(context.Background(), 1, 250); err != nil {
			t.Fatal(err)
		}
		time.Sleep(tInterval + tInterval/5)
		synctest.Wait()
		if off, ok := m.src.startedAt(1); !ok || off != 250 {
			t.Fatalf("partition 1 runs from %d (%v) one interval after the rewind; want 250 (starts: %v)", off, ok, m.src.starts)
		}
		m.close(t)
	})
}

// A store that lost everything (Redis restarted without persistence):
// the member claims again, resumes from the last checkpoint it knew
// (writing it back), and says so.
func TestBalancerSaysWhenCheckpointsAreLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		var logMu sync.Mutex
		s := newMemStore(tExpiration)
		m := startMember(t, s, nil, "a", 2, func(c *ownership.Config) {
			c.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				logMu.Lock()
				defer logMu.Unlock()
				return logs.Write(p)
			}), nil))
		})
		waitBalanced(t, 3, 2, m)
		m.src.process(0, 42)
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.wipe()
		time.Sleep(3 * tInterval)
		synctest.Wait()
		if off, ok := m.src.startedAt(0); !ok || off != 42 {
			t.Fatalf("partition 0 runs from %d (%v) after the store lost its data; want the last checkpoint it knew (42)", off, ok)
		}
		if got := s.checkpoint(0); got != 42 {
			t.Fatalf("checkpoint %d after the loss, want 42 written back", got)
		}
		logMu.Lock()
		got := logs.String()
		logMu.Unlock()
		if !strings.Contains(got, "CHECKPOINT LOST") || !strings.Contains(got, "last_known_offset=42") {
			t.Fatalf("no loud warning that the checkpoint of partition 0 was lost:\n%s", got)
		}
		m.close(t)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Fixed partitions: a static layout claims only its own, as soon as they
// are free.
func TestBalancerFixedPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		ma := startMember(t, s, nil, "a", 4, func(c *ownership.Config) { c.Fixed = []int32{0, 2} })
		mb := startMember(t, s, nil, "b", 4, func(c *ownership.Config) { c.Fixed = []int32{1, 3} })
		time.Sleep(2 * tInterval)
		synctest.Wait()
		if !slices.Equal(ma.src.owned(), []int32{0, 2}) || !slices.Equal(mb.src.owned(), []int32{1, 3}) {
			t.Fatalf("a runs %v, b runs %v; want [0 2] and [1 3]", ma.src.owned(), mb.src.owned())
		}
		time.Sleep(10 * tInterval)
		synctest.Wait()
		if !slices.Equal(ma.src.owned(), []int32{0, 2}) {
			t.Fatalf("a runs %v after 10 intervals", ma.src.owned())
		}
		ma.close(t)
		mb.close(t)
		if err := ma.b.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Fatalf("a second Run: %v, want an error (the source holds the first run's states)", err)
		}
	})
}

func TestBalancerConfigErrors(t *testing.T) {
	s := newMemStore(2 * time.Second)
	_, err := ownership.NewBalancer[int](s, newFake(1), ownership.Config{Interval: time.Second})
	if !errors.Is(err, ownership.ErrConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ID", "Interval", "at least 3 x"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	_, err = ownership.NewBalancer[int](s, newFake(1), ownership.Config{ID: "a", Interval: 500 * time.Millisecond, Margin: 1800 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "Margin") {
		t.Fatalf("a margin that self-fences between renewals: err = %v", err)
	}
}

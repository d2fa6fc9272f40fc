package ownership_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

// resolving is a fake source whose configured start moves on, as Latest
// does: each resolution is further than the one before.
type resolving struct {
	*fakeSource
	end int64
}

func (r *resolving) StartOffsets(_ context.Context, ps []int32) (map[int32]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end += 1000
	m := map[int32]int64{}
	for _, p := range ps {
		m[p] = r.end + int64(p)
	}
	return m, nil
}

// A partition without a checkpoint, read from Latest, changes owner
// before its first checkpoint: the new owner resumes where the first one
// started, not at its own (later) resolution of Latest — the records in
// between would be read by nobody.
func TestBalancerRecordsTheResolvedStartBeforeStarting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		fa := newFake(2)
		ma := startMemberOf(t, s, nil, "a", &resolving{fakeSource: fa}, fa)
		waitBalanced(t, 3, 2, ma)
		starts := map[int32]int64{}
		for p := range int32(2) {
			off, _ := fa.startedAt(p)
			if off < 0 {
				t.Fatalf("partition %d started at %d: the configured start was not resolved", p, off)
			}
			if got := s.checkpoint(p); got != off {
				t.Fatalf("partition %d started at %d with checkpoint %d: the start was not recorded first", p, off, got)
			}
			starts[p] = off
		}
		ma.crash() // before any record was processed or checkpointed
		fb := newFake(2)
		mb := startMemberOf(t, s, nil, "b", &resolving{fakeSource: fb, end: 50_000}, fb)
		time.Sleep(tExpiration + 3*tInterval)
		synctest.Wait()
		for p := range int32(2) {
			if off, ok := fb.startedAt(p); !ok || off != starts[p] {
				t.Errorf("b resumed partition %d at %d (%v), want a's start %d", p, off, ok, starts[p])
			}
		}
		mb.close(t)
		ma.b.Close(context.Background())
	})
}

// settledTrio starts three members sharing n partitions and waits until
// they are balanced; stolen counts their steals, done closes them and
// checks the audit.
func settledTrio(t *testing.T, s *memStore, n int) (ms []*member, stolen func() int64, done func()) {
	t.Helper()
	var a audit
	ms = []*member{startMember(t, s, &a, "a", n), startMember(t, s, &a, "b", n), startMember(t, s, &a, "c", n)}
	waitBalanced(t, 10, n, ms...)
	stolen = func() (k int64) {
		for _, m := range ms {
			k += m.b.Stats().Stolen
		}
		return k
	}
	done = func() {
		for _, m := range ms {
			m.close(t)
		}
		if len(a.bad) > 0 {
			t.Fatalf("two members' checkpoints accepted under one epoch: %v", a.bad)
		}
	}
	return ms, stolen, done
}

// After an outage longer than the expiration, every member comes back to
// a table where the others' presence has lapsed: none may take every
// partition (for the others to steal back one per round).
func TestBalancerDoesNotGrabEverythingAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		s := newMemStore(tExpiration)
		ms, stolen, done := settledTrio(t, s, n)
		before := stolen()
		s.setDown(true)
		time.Sleep(3 * tExpiration)
		synctest.Wait()
		if o := ownedBy(ms...); len(o) != 0 {
			t.Fatalf("partitions still run through the outage: %v", o)
		}
		s.setDown(false)
		waitBalanced(t, 4, n, ms...)
		if k := stolen() - before; k != 0 {
			t.Errorf("%d partitions stolen after the outage; want 0 (the shares taken from free partitions)", k)
		}
		done()
	})
}

// Redis restarted without its data: every member is long settled, but
// the first whose renewal is refused reads a table without the others'
// presence. Its presence recorded anew tells it so: it claims one
// partition per round until the others are back in the table, instead of
// taking every partition for them to steal back.
func TestBalancerDoesNotGrabEverythingAfterADataLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 12
		s := newMemStore(tExpiration)
		ms, stolen, done := settledTrio(t, s, n)
		time.Sleep(5 * tInterval)
		synctest.Wait()
		before := stolen()
		s.wipe()
		most, mostBy := 0, ""
		for start := time.Now(); time.Since(start) < 10*tInterval; {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			for _, m := range ms {
				if k := len(m.src.owned()); k > most {
					most, mostBy = k, m.id
				}
			}
		}
		if most > n/3+1 || stolen() != before {
			t.Errorf("after the data loss %s ran %d of %d partitions at once (fair share %d); %d steals followed",
				mostBy, most, n, n/3, stolen()-before)
		}
		if err := balanced(n, ms...); err != nil {
			t.Errorf("10 intervals after the data loss: %v", err)
		}
		done()
	})
}

// A checkpoint lost with the store's data, with a moving start (Latest):
// the balancer knows the last checkpoint it saw and resumes there, not
// at a fresh resolution of Latest (which would skip what came between).
func TestBalancerResumesAtTheKnownCheckpointAfterADataLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		fa := newFake(1)
		m := startMemberOf(t, s, nil, "a", &resolving{fakeSource: fa}, fa)
		waitBalanced(t, 3, 1, m)
		off, _ := fa.startedAt(0)
		fa.process(0, off+42)
		if err := m.b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.wipe()
		time.Sleep(3 * tInterval)
		synctest.Wait()
		if now, ok := fa.startedAt(0); !ok || now != off+42 {
			t.Errorf("after the loss partition 0 runs from %d (%v), want the last known checkpoint %d", now, ok, off+42)
		}
		if got := s.checkpoint(0); got != off+42 {
			t.Errorf("checkpoint after the loss %d, want %d written back", got, off+42)
		}
		m.close(t)
	})
}

// A steal from an owner cut off from the store: the old owner cannot
// learn of it and runs the partition until its self-fence deadline, so
// the two run it together for up to expiration - margin (not one
// interval): the bound docs/ownership.md states.
func TestBalancerStealOverlapEndsAtTheSelfFenceDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		s := newMemStore(tExpiration)
		ma := startMember(t, s, nil, "a", n)
		waitBalanced(t, 5, n, ma)
		time.Sleep(3 * tInterval)
		synctest.Wait()
		r0 := ma.b.Stats().Rounds
		for ma.b.Stats().Rounds == r0 { // just after a good renewal
			time.Sleep(time.Millisecond)
			synctest.Wait()
		}
		ma.v.setCut(true)
		mb := startMember(t, s, nil, "b", n)
		var longest time.Duration
		var since time.Time
		for range 5000 {
			time.Sleep(time.Millisecond)
			synctest.Wait()
			concurrent := false
			for _, ids := range ownedBy(ma, mb) {
				concurrent = concurrent || len(ids) == 2
			}
			switch {
			case concurrent && since.IsZero():
				since = time.Now()
			case concurrent:
				longest = max(longest, time.Since(since))
			default:
				since = time.Time{}
			}
		}
		if bound := tExpiration - tExpiration/5; longest > bound {
			t.Errorf("old owner and thief ran one partition together for %v, past expiration - margin (%v)", longest, bound)
		}
		ma.v.setCut(false)
		mb.close(t)
		ma.close(t)
	})
}

// A slow store (each claim and checkpoint read takes most of an interval)
// must not push the next renewal past the self-fence deadline: the calls
// of one round share one interval.
func TestBalancerRenewsOnTimeBehindSlowCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		// Another instance holds partitions 2 and 3, and dies.
		if won, _ := s.Claim(context.Background(), "gone", []ownership.Claim{{Partition: 2}, {Partition: 3}}); len(won) != 2 {
			t.Fatal("the other instance's claims failed")
		}
		m := startMember(t, s, nil, "a", 4)
		time.Sleep(2 * tInterval)
		synctest.Wait()
		if got := m.src.owned(); !slices.Equal(got, []int32{0, 1}) {
			t.Fatalf("runs %v, want [0 1] while the other holds 2 and 3", got)
		}
		m.v.mu.Lock()
		m.v.delay = tInterval * 9 / 10
		m.v.mu.Unlock()
		// When their leases expire, a claims them, then reads their
		// checkpoints: two slow calls in one round.
		time.Sleep(tExpiration + 3*tInterval)
		synctest.Wait()
		if st := m.b.Stats(); st.SelfFences != 0 {
			t.Fatalf("self-fenced %d times behind slow calls: %+v", st.SelfFences, st)
		}
		if got := m.src.owned(); len(got) != 4 {
			t.Fatalf("runs %v, want all 4", got)
		}
		m.v.mu.Lock()
		m.v.delay = 0
		m.v.mu.Unlock()
		m.close(t)
	})
}

// A pipeline whose Run returned without a Close (a forgotten Close, a
// worker stuck in its shutdown) does not keep its partitions owned and
// unread: after the expiration the balancer closes itself.
func TestBalancerRelinquishesWhenCloseDoesNotFollowRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		ma := startMember(t, s, nil, "a", 4)
		waitBalanced(t, 3, 4, ma)
		ma.src.process(2, 77)
		ma.cancel()
		<-ma.done
		time.Sleep(tExpiration + tInterval)
		synctest.Wait()
		for p := range int32(4) {
			if o, _ := s.owner(p); o != "" {
				t.Fatalf("partition %d still owned by %q %v after a's Run returned", p, o, tExpiration+tInterval)
			}
		}
		if got := s.checkpoint(2); got != 77 {
			t.Fatalf("checkpoint of partition 2 = %d, want the settled 77", got)
		}
		mb := startMember(t, s, nil, "b", 4)
		waitBalanced(t, 3, 4, mb)
		if err := ma.b.Close(context.Background()); err != nil {
			t.Fatalf("a late Close: %v", err)
		}
		mb.close(t)
	})
}

// Partitions added to the stream are claimed too.
func TestBalancerClaimsPartitionsAddedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemStore(tExpiration)
		m := startMember(t, s, nil, "a", 2)
		waitBalanced(t, 3, 2, m)
		m.src.mu.Lock()
		m.src.parts = append(m.src.parts, 2, 3)
		m.src.mu.Unlock()
		time.Sleep(3 * tInterval)
		synctest.Wait()
		if got := m.src.owned(); !slices.Equal(got, []int32{0, 1, 2, 3}) {
			t.Fatalf("runs %v three intervals after partitions 2 and 3 were added", got)
		}
		m.close(t)
	})
}

var _ ownership.StartResolver = (*resolving)(nil)

// Close given the context that stopped the pipeline (already cancelled):
// with a real Redis, the final checkpoint and the relinquish must still
// be sent, or the next owner waits for the expiration and reprocesses what
// was settled since the last periodic checkpoint.
func TestBalancerCloseWithTheContextThatStoppedThePipeline(t *testing.T) {
	addr := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "review", Stream: "s", Group: "g", Expiration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := newFake(1)
	bal, err := ownership.NewBalancer[int](store, src, ownership.Config{ID: "me", Interval: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // signal.NotifyContext in a worker
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, stream.Source[int](bal)), stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		for {
			if _, err := in.Recv(ctx); err != nil {
				return nil
			}
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(src.owned()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	src.process(0, 1234) // settled, not yet checkpointed
	cancel()
	<-done
	cerr := bal.Close(ctx)
	cks, _ := store.Checkpoints(context.Background(), []int32{0})
	tb, _ := store.Table(context.Background(), []int32{0})
	if cerr != nil || cks[0].Offset != 1234 || tb.Owners[0].Owner != "" {
		t.Errorf("Close(cancelled ctx) = %v: final checkpoint %d (want 1234), owner %q (want relinquished)", cerr, cks[0].Offset, tb.Owners[0].Owner)
	}
}

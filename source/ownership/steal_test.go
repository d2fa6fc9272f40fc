package ownership_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// runWatch follows, across members, which of them run each partition,
// and records every start of a partition another member still runs.
type runWatch struct {
	mu      sync.Mutex
	running map[int32]map[string]bool
	bad     []string
}

// of returns a Config change that reports member id's starts and stops.
func (w *runWatch) of(id string) func(*ownership.Config) {
	return func(cfg *ownership.Config) {
		next := cfg.OnChange
		cfg.OnChange = func(c ownership.Change) {
			w.mu.Lock()
			if w.running == nil {
				w.running = map[int32]map[string]bool{}
			}
			rs := w.running[c.Partition]
			if rs == nil {
				rs = map[string]bool{}
				w.running[c.Partition] = rs
			}
			if c.Started {
				if len(rs) > 0 {
					w.bad = append(w.bad, fmt.Sprintf("%s started partition %d at %v while %v ran it", id, c.Partition, time.Now().Format("15:04:05.000"), rs))
				}
				rs[id] = true
			} else {
				delete(rs, id)
			}
			w.mu.Unlock()
			if next != nil {
				next(c)
			}
		}
	}
}

func (w *runWatch) overlaps() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

// A member joining a group steals its share from a member above it: the
// thief starts a stolen partition only once the old owner stopped it
// (refused at its next renewal), never while the old owner still
// processes it.
func TestBalancerStartsAStolenPartitionOnlyOnceItsOldOwnerStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		s := newMemStore(tExpiration)
		var w runWatch
		var a audit
		ma := startMember(t, s, &a, "a", n, w.of("a"))
		waitBalanced(t, 4, n, ma)
		mb := startMember(t, s, &a, "b", n, w.of("b"))
		waitBalanced(t, 20, n, ma, mb)
		if k := ma.b.Stats().Stolen + mb.b.Stats().Stolen; k == 0 {
			t.Fatal("nothing was stolen: the test proves nothing")
		}
		if bad := w.overlaps(); len(bad) > 0 {
			t.Errorf("stolen partitions started while their old owner ran them:\n%v", bad)
		}
		mb.close(t)
		ma.close(t)
		if len(a.bad) > 0 {
			t.Fatalf("two members' checkpoints accepted under one epoch: %v", a.bad)
		}
	})
}

// The old owner of a stolen partition cannot reach the store after the
// steal: it never learns of it, and stops the partition at its
// self-fence deadline. The thief starts the partition only after the old
// lease would have expired by the store's clock.
func TestBalancerStartsAPartitionStolenFromAnUnreachableOwnerAfterItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		s := newMemStore(tExpiration)
		var w runWatch
		ma := startMember(t, s, nil, "a", n, w.of("a"))
		waitBalanced(t, 4, n, ma)
		// b steals; a is cut off from the store at b's first steal.
		stolen := make(chan struct{})
		var once sync.Once
		mb := startMember(t, s, nil, "b", n, w.of("b"), func(cfg *ownership.Config) {
			cfg.Strategy = ownership.Greedy
		})
		for mb.b.Stats().Stolen == 0 {
			time.Sleep(time.Millisecond)
		}
		once.Do(func() { ma.v.setCut(true); close(stolen) })
		<-stolen
		time.Sleep(2 * tExpiration)
		synctest.Wait()
		if bad := w.overlaps(); len(bad) > 0 {
			t.Errorf("a stolen partition started while its old owner ran it:\n%v", bad)
		}
		if len(mb.src.owned()) == 0 {
			t.Error("the thief started nothing after the old lease expired")
		}
		ma.v.setCut(false)
		mb.close(t)
		ma.close(t)
	})
}

// A member joining a member that holds every partition takes its share
// in a few rounds, however large the share: the rounds to fair shares do
// not grow with the number of partitions (one steal per round made them
// grow with the share).
func TestBalancerJoiningTakesItsShareInRoundsThatDoNotGrowWithIt(t *testing.T) {
	for _, n := range []int{8, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newMemStore(tExpiration)
				var w runWatch
				ma := startMember(t, s, nil, "a", n, w.of("a"))
				waitBalanced(t, 4, n, ma)
				mb := startMember(t, s, nil, "b", n, w.of("b"))
				rounds := waitBalanced(t, 3*n, n, ma, mb)
				if rounds > 6 {
					t.Errorf("%d partitions: the newcomer took its share in %d rounds, want at most 6", n, rounds)
				}
				if bad := w.overlaps(); len(bad) > 0 {
					t.Errorf("overlaps: %v", bad)
				}
				mb.close(t)
				ma.close(t)
			})
		})
	}
}

// After an outage longer than the expiration every lease has lapsed and
// every partition is free: each member takes back the partitions it
// held, not a random share (each partition would move to another member
// for nothing).
func TestBalancerTakesBackItsOwnPartitionsAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 24
		s := newMemStore(tExpiration)
		ms, _, done := settledTrio(t, s, n)
		before := map[string][]int32{}
		for _, m := range ms {
			before[m.id] = m.src.owned()
		}
		s.setDown(true)
		time.Sleep(3 * tExpiration)
		synctest.Wait()
		s.setDown(false)
		waitBalanced(t, 10, n, ms...)
		moved := 0
		for _, m := range ms {
			for _, p := range m.src.owned() {
				if !slices.Contains(before[m.id], p) {
					moved++
				}
			}
		}
		if moved != 0 {
			t.Errorf("%d of %d partitions moved to another member after the outage; want 0", moved, n)
		}
		done()
	})
}

// A thief waiting for the old owner of a stolen partition to stop it
// looks again soon: it starts the partition within a quarter interval
// (and its jitter) of the old owner's stop, not at its next full round.
func TestBalancerStartsAStolenPartitionSoonAfterItsOldOwnerStopped(t *testing.T) {
	for _, off := range []time.Duration{0, tInterval / 4, tInterval / 2, 3 * tInterval / 4} {
		t.Run(fmt.Sprint(off), func(t *testing.T) { testStolenStartsSoon(t, off) })
	}
}

// testStolenStartsSoon starts the thief off into the old owner's
// interval.
func testStolenStartsSoon(t *testing.T, off time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		const n = 16
		s := newMemStore(tExpiration)
		var mu sync.Mutex
		stopped := map[int32]time.Time{}
		var gaps []time.Duration
		ma := startMember(t, s, nil, "a", n, func(cfg *ownership.Config) {
			cfg.OnChange = func(c ownership.Change) {
				if !c.Started && c.Reason != ownership.StopClosed {
					mu.Lock()
					stopped[c.Partition] = time.Now()
					mu.Unlock()
				}
			}
		})
		waitBalanced(t, 4, n, ma)
		time.Sleep(off)
		mb := startMember(t, s, nil, "b", n, func(cfg *ownership.Config) {
			cfg.OnChange = func(c ownership.Change) {
				mu.Lock()
				defer mu.Unlock()
				if at, ok := stopped[c.Partition]; ok && c.Started {
					gaps = append(gaps, time.Since(at))
				}
			}
		})
		waitBalanced(t, 10, n, ma, mb)
		mb.close(t)
		ma.close(t)
		mu.Lock()
		defer mu.Unlock()
		if len(gaps) == 0 {
			t.Fatal("no stolen partition started: the test proves nothing")
		}
		for _, g := range gaps {
			if g > tInterval/4+tInterval/10 {
				t.Errorf("a stolen partition started %v after its old owner stopped it, want at most %v", g, tInterval/4+tInterval/10)
			}
		}
	})
}

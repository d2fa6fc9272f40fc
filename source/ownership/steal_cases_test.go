package ownership_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// rowOf returns partition p's record in a table read by id.
func rowOf(t *testing.T, s ownership.Store, id string, p int32) ownership.Ownership {
	t.Helper()
	tb, _, err := s.Renew(context.Background(), id, []int32{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tb.Owners[0]
}

// A member whose acknowledgement of a steal was lost (a failed
// Relinquish: "only delays that start") may take the partition back
// while it is still the record's pending Previous, and starts it at once
// (it knows it stopped it). When a third member then steals it from that
// live, processing owner, the record must not let the thief start while
// the owner's just-renewed lease could still be processed: the Previous
// kept is the one of the first steal, with its old last renewal, so it
// lapses by time long before the owner actually running the partition
// could have stopped.
func TestStoreASecondStealKeepsAStalePreviousOfALiveOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newMemStore(tExpiration) // 3 s
		const p = 0
		claim := func(id string) ownership.Lease { return claimOne(t, s, id, p) }
		renew := func(id string, l ownership.Lease) ownership.Outcome {
			t.Helper()
			_, outs, err := s.Renew(ctx, id, []int32{p}, []ownership.Lease{l})
			if err != nil {
				t.Fatal(err)
			}
			return outs[0]
		}
		a1 := claim("a") // a runs p
		time.Sleep(500 * time.Millisecond)
		renew("a", a1) // a's last renewal before the steal: t=0.5
		time.Sleep(100 * time.Millisecond)
		claim("b") // b steals p: Previous a, pending
		time.Sleep(900 * time.Millisecond)
		if out := renew("a", a1); out != ownership.Fenced {
			t.Fatalf("a's renewal after the steal: %v", out)
		}
		// a stopped p; its acknowledgement (Relinquish) failed. It takes
		// p back from b, who never started it (still waiting for a).
		a2 := claim("a")
		if o := rowOf(t, s, "a", p); o.Owner != "a" || o.Previous != "a" {
			t.Fatalf("after a took p back: %+v", o)
		}
		// a starts p at once (Previous is itself), and renews it.
		for range 2 {
			time.Sleep(900 * time.Millisecond)
			if out := renew("a", a2); out != ownership.Accepted {
				t.Fatalf("a's renewal of p: %v", out)
			}
		}
		// t=3.3: a renewed p just now and runs it. c steals it.
		time.Sleep(150 * time.Millisecond)
		claim("c")
		time.Sleep(150 * time.Millisecond)
		o := rowOf(t, s, "c", p)
		// a renewed p 0.3 s ago: it may run it until its next renewal or
		// its self-fence deadline, 3 s - margin after that renewal.
		if !o.Pending(tExpiration) {
			t.Errorf("c may start p (Previous %q, PreviousAge %v) while a, which renewed p 0.3 s ago, still runs it: two members process p at once",
				o.Previous, o.PreviousAge)
		}
	})
}

// The same through a Balancer: an instance restarted under its id (a
// StatefulSet pod's name) while the partitions of its former process are
// still stolen from it and unacknowledged takes one back and starts it at
// once (Previous is its own id). It then loses the store; a thief taking
// the partition from it waits only for the Previous recorded before the
// restart, and the record lets the thief start while the restarted
// instance, whose self-fence deadline is over a second away, still runs
// the partition.
func TestBalancerRestartedUnderItsIDThenStolenOverlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newMemStore(tExpiration)
		take := func(id string, ps ...int32) {
			t.Helper()
			tb, _, err := s.Renew(ctx, id, []int32{0, 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var cs []ownership.Claim
			for _, p := range ps {
				cs = append(cs, ownership.Claim{Partition: p, Version: tb.Owners[p].Version})
			}
			if won, err := s.Claim(ctx, id, cs); err != nil || len(won) != len(ps) {
				t.Fatalf("%s's claim of %v: %v %v", id, ps, won, err)
			}
		}
		// a's former process runs both partitions; b steals both from it,
		// and a's process dies before it could acknowledge.
		take("a", 0, 1)
		take("b", 0, 1)
		time.Sleep(100 * time.Millisecond)
		// a restarts under its id; b keeps its leases live meanwhile.
		ma := startMember(t, s, nil, "a", 2)
		var bl []ownership.Lease
		for p := range int32(2) {
			_, e := s.owner(p)
			bl = append(bl, ownership.Lease{Partition: p, Epoch: e})
		}
		var p int32 = -1
		for range 24 { // to t=2.5
			synctest.Wait()
			if _, _, err := s.Renew(ctx, "b", []int32{0, 1}, bl); err != nil {
				t.Fatal(err)
			}
			if own := ma.src.owned(); len(own) == 1 && p < 0 {
				p = own[0]
			}
			time.Sleep(100 * time.Millisecond)
		}
		if p < 0 {
			t.Fatalf("a took nothing back: %v", ma.src.owned())
		}
		ma.v.setCut(true) // a loses the store: it runs p to its self-fence deadline
		time.Sleep(400 * time.Millisecond)
		take("c", p) // t=2.9
		time.Sleep(150 * time.Millisecond)
		o := rowOf(t, s, "c", p)
		synctest.Wait()
		if !o.Pending(tExpiration) && slices.Contains(ma.src.owned(), p) {
			t.Errorf("c may start partition %d (Previous %q, PreviousAge %v) while a still runs it: two members process it at once",
				p, o.Previous, o.PreviousAge)
		}
		ma.v.setCut(false)
		ma.close(t)
	})
}

// A rewind (SetCheckpoint) raises the epoch of a partition under its
// owner, who learns of it only at its next renewal or checkpoint. A steal
// in between records that owner as Previous under the rewind's epoch, a
// lease it never held: when the owner, refused, stops the partition and
// acknowledges the lease it did hold, the acknowledgement does not match,
// and the thief waits for the old lease to expire by time (the partition
// unread all that while) though its old owner stopped and said so.
func TestStoreAcknowledgementAfterARewindAndASteal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newMemStore(tExpiration)
		const p = 0
		claim := func(id string) ownership.Lease { return claimOne(t, s, id, p) }
		a1 := claim("a")
		time.Sleep(500 * time.Millisecond)
		if err := s.SetCheckpoint(ctx, p, 0); err != nil { // an operator's rewind
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		claim("b") // b steals p before a learns of the rewind
		time.Sleep(400 * time.Millisecond)
		_, outs, err := s.Renew(ctx, "a", []int32{p}, []ownership.Lease{a1})
		if err != nil || outs[0] != ownership.Fenced {
			t.Fatalf("a's renewal: %v %v", outs, err)
		}
		// a stopped p: it acknowledges the lease it lost, as the balancer does.
		if err := s.Relinquish(ctx, "a", []ownership.Lease{a1}); err != nil {
			t.Fatal(err)
		}
		if o := rowOf(t, s, "b", p); o.Pending(tExpiration) {
			t.Errorf("a stopped p and acknowledged its lease, yet b must still wait (Previous %q, PreviousAge %v): p stays unread until a's old lease expires",
				o.Previous, o.PreviousAge)
		}
	})
}

// claimOne claims partition p for id at the version id reads, and fails
// the test unless the claim is won.
func claimOne(t *testing.T, s ownership.Store, id string, p int32) ownership.Lease {
	t.Helper()
	o := rowOf(t, s, id, p)
	won, err := s.Claim(context.Background(), id, []ownership.Claim{{Partition: p, Version: o.Version}})
	if err != nil || len(won) != 1 {
		t.Fatalf("%s's claim: %v %v", id, won, err)
	}
	return won[0]
}

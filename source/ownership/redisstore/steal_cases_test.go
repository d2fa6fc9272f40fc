package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// The scripts keep a pending Previous through a second steal even when
// the owner robbed the second time is that same Previous, back on the
// partition (its acknowledgement of the first steal lost, or its
// restart under the same id): the thief's wait then ends by the old
// Previous's last renewal, while the owner it robbed renewed the
// partition moments before and may still run it.
func TestSecondStealOfAPreviousBackOnItKeepsItsOldRenewal(t *testing.T) {
	const exp = 2 * time.Second
	s, _ := newStore(t, exp)
	ctx := context.Background()
	const p = 3
	claim := func(id string) ownership.Lease {
		t.Helper()
		v := table(t, s, p).Owners[0].Version
		won, err := s.Claim(ctx, id, []ownership.Claim{{Partition: p, Version: v}})
		if err != nil || len(won) != 1 {
			t.Fatalf("%s's claim: %v %v", id, won, err)
		}
		return won[0]
	}
	claim("a")
	claim("b") // b steals from a: Previous a
	a2 := claim("a")
	if o := table(t, s, p).Owners[0]; o.Owner != "a" || o.Previous != "a" {
		t.Fatalf("after a took p back: %+v", o)
	}
	var last time.Time
	for start := time.Now(); time.Since(start) < exp*3/4; time.Sleep(100 * time.Millisecond) {
		_, outs, err := s.Renew(ctx, "a", []int32{p}, []ownership.Lease{a2})
		if err != nil || outs[0] != ownership.Accepted {
			t.Fatalf("a's renewal: %v %v", outs, err)
		}
		last = time.Now()
	}
	claim("c")
	time.Sleep(exp / 2)
	o := table(t, s, p).Owners[0]
	if !o.Pending(exp) && time.Since(last) <= exp {
		t.Errorf("c may start p (Previous %q, PreviousAge %v) while a renewed it %v ago and may still run it",
			o.Previous, o.PreviousAge, time.Since(last).Round(time.Millisecond))
	}
}

package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

func newStore(t *testing.T, exp time.Duration) (*redisstore.Store, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(redisstore.Config{Client: c, Namespace: "ns", Stream: "readings", Group: "g", Expiration: exp})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// table reads the table of partitions as member "observer".
func table(t *testing.T, s *redisstore.Store, parts ...int32) ownership.Table {
	t.Helper()
	tb, _, err := s.Renew(context.Background(), "observer", parts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// Many claimants of one partition, each naming the version they saw:
// exactly one wins per version, and every win raises the epoch.
func TestClaimOneWinnerPerVersion(t *testing.T) {
	s, _ := newStore(t, time.Minute)
	ctx := context.Background()
	var epoch int64
	for round := range 20 {
		v := table(t, s, 0).Owners[0].Version
		var (
			mu  sync.Mutex
			won []string
			wg  sync.WaitGroup
		)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := "i-" + string(rune('a'+g))
				leases, err := s.Claim(ctx, id, []ownership.Claim{{Partition: 0, Version: v}})
				if err != nil {
					t.Error(err)
					return
				}
				if len(leases) == 1 {
					mu.Lock()
					won = append(won, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d winners %v, want one", round, len(won), won)
		}
		o := table(t, s, 0).Owners[0]
		if o.Owner != won[0] || o.Epoch <= epoch || o.Version <= v {
			t.Fatalf("round %d: record %+v, want owner %s at an epoch above %d and a version above %d", round, o, won[0], epoch, v)
		}
		epoch = o.Epoch
	}
}

// A checkpoint is written only by the current owner under its current
// epoch; an owner whose partition was taken has its checkpoints and
// renewals refused, and checkpoints never move back but by SetCheckpoint.
func TestCheckpointFencedByEpoch(t *testing.T) {
	s, _ := newStore(t, time.Minute)
	ctx := context.Background()
	a, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 3, Version: 0}})
	if err != nil || len(a) != 1 || a[0].Epoch < 1 {
		t.Fatalf("a's claim: %v, %v", a, err)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[0], Offset: 100, Sequence: 7}, ownership.Accepted)
	// b takes the partition from a (a steal names the version it saw).
	b, err := s.Claim(ctx, "b", []ownership.Claim{{Partition: 3, Version: table(t, s, 3).Owners[0].Version}})
	if err != nil || len(b) != 1 || b[0].Epoch <= a[0].Epoch {
		t.Fatalf("b's claim: %v, %v; want an epoch above %d", b, err, a[0].Epoch)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[0], Offset: 150}, ownership.Fenced)
	// a's epoch with b's name is no better: the epoch is the token.
	mustOutcome(t, s, "b", ownership.Write{Lease: a[0], Offset: 150}, ownership.Fenced)
	if _, outs, err := s.Renew(ctx, "a", nil, a); err != nil || outs[0] != ownership.Fenced {
		t.Fatalf("a's renewal after b's claim: %v, %v; want fenced", outs, err)
	}
	mustOutcome(t, s, "b", ownership.Write{Lease: b[0], Offset: 120}, ownership.Accepted)
	mustOutcome(t, s, "b", ownership.Write{Lease: b[0], Offset: 110}, ownership.Behind)
	ck := checkpoints(t, s, 3)[0]
	if ck.Offset != 120 || ck.Epoch != b[0].Epoch || ck.Owner != "b" || ck.Written.IsZero() {
		t.Fatalf("checkpoint %+v, want b's 120 at epoch %d", ck, b[0].Epoch)
	}
	// a relinquishing what it no longer holds changes nothing.
	if err := s.Relinquish(ctx, "a", a); err != nil {
		t.Fatal(err)
	}
	if o := table(t, s, 3).Owners[0]; o.Owner != "b" || o.Epoch != b[0].Epoch {
		t.Fatalf("after a's relinquish: %+v, want b's at epoch %d", o, b[0].Epoch)
	}
	if err := s.Relinquish(ctx, "b", b); err != nil {
		t.Fatal(err)
	}
	o := table(t, s, 3).Owners[0]
	if o.Owner != "" || o.Epoch <= b[0].Epoch || !o.Expired(time.Minute) {
		t.Fatalf("after b's relinquish: %+v, want no owner at an epoch above %d", o, b[0].Epoch)
	}
	mustOutcome(t, s, "b", ownership.Write{Lease: b[0], Offset: 130}, ownership.Fenced)
}

// Redis restarted without its data (or failed over to a replica that
// had not received the writes) forgets every record; the epochs handed out
// after it are still above those handed out before, so a lease from
// before the loss never matches one from after, even under the same
// owner id (a pod restarted under its name while its old process, paused,
// still holds the old lease).
func TestEpochsStayAboveThoseBeforeADataLoss(t *testing.T) {
	s, c := newStore(t, time.Minute)
	ctx := context.Background()
	old, err := s.Claim(ctx, "pod-0", []ownership.Claim{{Partition: 2, Version: 0}})
	if err != nil || len(old) != 1 {
		t.Fatalf("claim: %v, %v", old, err)
	}
	mustOutcome(t, s, "pod-0", ownership.Write{Lease: old[0], Offset: 500, Sequence: -1}, ownership.Accepted)
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	now, err := s.Claim(ctx, "pod-0", []ownership.Claim{{Partition: 2, Version: 0}})
	if err != nil || len(now) != 1 {
		t.Fatalf("claim after the loss: %v, %v", now, err)
	}
	if now[0].Epoch <= old[0].Epoch {
		t.Fatalf("epoch after the data loss %d, not above %d from before it", now[0].Epoch, old[0].Epoch)
	}
	// The paused process's checkpoint under its old lease is refused.
	mustOutcome(t, s, "pod-0", ownership.Write{Lease: old[0], Offset: 900, Sequence: -1}, ownership.Fenced)
	if _, outs, err := s.Renew(ctx, "pod-0", nil, old); err != nil || outs[0] != ownership.Fenced {
		t.Fatalf("renewal of the lease from before the loss: %v, %v; want fenced", outs, err)
	}
	mustOutcome(t, s, "pod-0", ownership.Write{Lease: now[0], Offset: 10, Sequence: -1}, ownership.Accepted)
}

// A lease lapses by Redis's clock: past the expiration without a renewal,
// the owner's checkpoints and renewals are refused and its presence is
// gone, though nobody claimed the partition.
func TestLeaseExpiresByRedisClock(t *testing.T) {
	const exp = 300 * time.Millisecond
	s, _ := newStore(t, exp)
	ctx := context.Background()
	if _, _, err := s.Renew(ctx, "a", []int32{0}, nil); err != nil {
		t.Fatal(err)
	}
	a, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 0, Version: 0}})
	if err != nil || len(a) != 1 {
		t.Fatalf("claim: %v, %v", a, err)
	}
	// Renewed within the expiration, the lease holds.
	for range 3 {
		time.Sleep(exp / 3)
		if _, outs, err := s.Renew(ctx, "a", nil, a); err != nil || outs[0] != ownership.Accepted {
			t.Fatalf("renewal: %v, %v", outs, err)
		}
	}
	var o ownership.Ownership
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		tb := table(t, s, 0)
		if o = tb.Owners[0]; o.Expired(exp) {
			for _, m := range tb.Members {
				if m.ID == "a" {
					t.Fatalf("member a present (%v old) with its lease expired", m.Age)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease has not expired in 10 s: %+v", o)
		}
	}
	if o.Owner != "a" {
		t.Fatalf("record %+v: an expired lease keeps its owner's name until claimed", o)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[0], Offset: 5}, ownership.Fenced)
	if _, outs, err := s.Renew(ctx, "a", nil, a); err != nil || outs[0] != ownership.Fenced {
		t.Fatalf("renewal of an expired lease: %v, %v; want fenced", outs, err)
	}
	// Claiming it again, even by a, is a new epoch.
	again, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 0, Version: o.Version}})
	if err != nil || len(again) != 1 || again[0].Epoch <= a[0].Epoch {
		t.Fatalf("claim after expiry: %v, %v", again, err)
	}
}

// A rewind sets the checkpoint back and raises the epoch: the owner's
// lease is fenced; claiming the partition again, it finds the rewound
// checkpoint and writes from there.
func TestSetCheckpointRewindsAndFences(t *testing.T) {
	s, _ := newStore(t, time.Minute)
	ctx := context.Background()
	if err := s.SetCheckpoint(ctx, 1, 40); err != nil { // a start before any claim
		t.Fatal(err)
	}
	if ck := checkpoints(t, s, 1)[0]; ck.Offset != 40 {
		t.Fatalf("checkpoint %+v, want 40", ck)
	}
	a, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 1, Version: table(t, s, 1).Owners[0].Version}})
	if err != nil || len(a) != 1 {
		t.Fatalf("claim: %v, %v", a, err)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[0], Offset: 900}, ownership.Accepted)
	if err := s.SetCheckpoint(ctx, 1, 500); err != nil {
		t.Fatal(err)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[0], Offset: 950}, ownership.Fenced)
	if _, outs, err := s.Renew(ctx, "a", nil, a); err != nil || outs[0] != ownership.Fenced {
		t.Fatalf("renewal after a rewind: %v, %v; want fenced", outs, err)
	}
	o := table(t, s, 1).Owners[0]
	again, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 1, Version: o.Version}})
	if err != nil || len(again) != 1 {
		t.Fatalf("claim after the rewind: %v, %v", again, err)
	}
	if ck := checkpoints(t, s, 1)[0]; ck.Offset != 500 {
		t.Fatalf("checkpoint %+v after the rewind, want 500", ck)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: again[0], Offset: 501}, ownership.Accepted)
	if got := checkpoints(t, s, 2)[0]; got.Offset != -1 {
		t.Fatalf("a partition never checkpointed: %+v, want offset -1", got)
	}
}

// Every key of a (namespace, stream, group) carries the same hash tag, so
// the scripts' keys fall in one Redis Cluster slot.
func TestKeysShareOneHashTag(t *testing.T) {
	s, c := newStore(t, time.Minute)
	ctx := context.Background()
	a, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 0, Version: 0}, {Partition: 9, Version: 0}})
	if err != nil || len(a) != 2 {
		t.Fatalf("claim: %v, %v", a, err)
	}
	mustOutcome(t, s, "a", ownership.Write{Lease: a[1], Offset: 1}, ownership.Accepted)
	table(t, s, 0, 9)
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 7 {
		t.Fatalf("keys %v, want two ownerships, a checkpoint, the members, the stamp, the leases' renewals and the members keeping the stamp", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "sluice:own:{ns/readings/g}:") {
			t.Fatalf("key %q outside the hash tag {ns/readings/g}", k)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		cfg  redisstore.Config
		want string
	}{
		{redisstore.Config{Stream: "s", Group: "g", Expiration: time.Second}, "Client"},
		{redisstore.Config{Client: c, Group: "g", Expiration: time.Second}, "Stream and Group"},
		{redisstore.Config{Client: c, Stream: "s", Group: "g"}, "Expiration"},
		{redisstore.Config{Client: c, Stream: "s{1}", Group: "g", Expiration: time.Second}, "Stream \"s{1}\" holds a brace"},
	} {
		if _, err := redisstore.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func mustOutcome(t *testing.T, s *redisstore.Store, owner string, w ownership.Write, want ownership.Outcome) {
	t.Helper()
	outs, err := s.Checkpoint(context.Background(), owner, []ownership.Write{w})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0] != want {
		t.Fatalf("%s's checkpoint %+v: %v, want %v", owner, w, outs[0], want)
	}
}

func checkpoints(t *testing.T, s *redisstore.Store, parts ...int32) []ownership.Checkpoint {
	t.Helper()
	cks, err := s.Checkpoints(context.Background(), parts)
	if err != nil {
		t.Fatal(err)
	}
	return cks
}

// Table reads without writing: no presence recorded, no version changed.
func TestTableOnlyReads(t *testing.T) {
	s, _ := newStore(t, time.Minute)
	ctx := context.Background()
	if _, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Table(ctx, []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Table(ctx, []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Members) != 0 || after.Owners[0].Version != before.Owners[0].Version || after.Owners[0].Owner != "a" {
		t.Fatalf("Table wrote: members %v, version %d -> %d, owner %q", after.Members, before.Owners[0].Version, after.Owners[0].Version, after.Owners[0].Owner)
	}
}

// A renewal says whether it recorded the member's presence anew: its
// first, or one after Redis lost the members with its data.
func TestRenewSaysWhenPresenceIsFresh(t *testing.T) {
	s, c := newStore(t, time.Minute)
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		tb, _, err := s.Renew(ctx, "a", []int32{0}, nil)
		if err != nil || tb.Fresh != want {
			t.Fatalf("renewal %d: Fresh = %v, %v; want %v", i, tb.Fresh, err, want)
		}
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if tb, _, err := s.Renew(ctx, "a", []int32{0}, nil); err != nil || !tb.Fresh {
		t.Fatalf("renewal after the data loss: Fresh = %v, %v; want true", tb.Fresh, err)
	}
	if tb, err := s.Table(ctx, []int32{0}); err != nil || tb.Fresh {
		t.Fatalf("a read-only table: Fresh = %v, %v; want false", tb.Fresh, err)
	}
}

// RenewSince reads the table again only when something a plan reads
// changed: a claim, a relinquish, a rewind, a member coming, leaving or
// lapsing, a lease lapsing, the data lost. Renewals and checkpoints change
// nothing a plan reads.
func TestRenewSinceStampsWhatAPlanReads(t *testing.T) {
	const exp = 600 * time.Millisecond
	s, c := newStore(t, exp)
	ctx := context.Background()
	parts := []int32{0, 1, 2}
	var seen int64
	var leases []ownership.Lease
	renew := func(owner string) ownership.Table {
		t.Helper()
		tb, outs, err := s.RenewSince(ctx, owner, parts, leases, seen)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if owner == "a" && o != ownership.Accepted {
				t.Fatalf("lease %v: %v", leases[i], o)
			}
		}
		return tb
	}
	// step checks that a's renewal after what reads the table (changed)
	// or not, and keeps the stamp a's renewal saw.
	step := func(what string, changed bool) ownership.Table {
		t.Helper()
		tb := renew("a")
		if tb.Unchanged == changed {
			t.Fatalf("after %s: Unchanged = %v, want %v (stamp %d, seen %d)", what, tb.Unchanged, !changed, tb.Stamp, seen)
		}
		if !tb.Unchanged && len(tb.Owners) != len(parts) {
			t.Fatalf("after %s: a table of %d partitions, want %d", what, len(tb.Owners), len(parts))
		}
		if tb.Stamp == 0 {
			t.Fatalf("after %s: no stamp", what)
		}
		seen = tb.Stamp
		return tb
	}
	step("the first renewal", true)
	step("nothing", false)
	won, err := s.Claim(ctx, "a", []ownership.Claim{{Partition: 0}, {Partition: 1}})
	if err != nil || len(won) != 2 {
		t.Fatalf("claim: %v, %v", won, err)
	}
	leases = won
	step("a claim", true)
	step("a renewal", false)
	if outs, err := s.Checkpoint(ctx, "a", []ownership.Write{{Lease: leases[0], Offset: 5}}); err != nil || outs[0] != ownership.Accepted {
		t.Fatalf("checkpoint: %v, %v", outs, err)
	}
	step("a checkpoint", false)
	if _, _, err := s.Renew(ctx, "b", parts, nil); err != nil {
		t.Fatal(err)
	}
	step("a member coming", true)
	if err := s.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	step("a member leaving", true)
	if err := s.Relinquish(ctx, "a", leases[1:]); err != nil {
		t.Fatal(err)
	}
	leases = leases[:1]
	step("a relinquish", true)
	if err := s.SetCheckpoint(ctx, 2, 7); err != nil {
		t.Fatal(err)
	}
	step("a rewind", true)
	// b claims partition 2, then renews its presence but not the lease (as
	// a member that stopped the partition and cannot relinquish it): the
	// lease lapses while b is present, and changes the stamp once seen lapsed.
	tb := renew("b")
	if _, err := s.Claim(ctx, "b", []ownership.Claim{{Partition: 2, Version: tb.Owners[2].Version}}); err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	step("b's claim", true)
	for {
		time.Sleep(50 * time.Millisecond)
		if _, _, err := s.Renew(ctx, "b", nil, nil); err != nil {
			t.Fatal(err)
		}
		tb := renew("a")
		if !tb.Unchanged {
			if time.Since(claimed) <= exp {
				t.Fatalf("the table changed %v after b's claim, before its lease could lapse", time.Since(claimed))
			}
			if !tb.Owners[2].Expired(exp) {
				t.Fatalf("changed, but partition 2 not expired: %+v", tb.Owners[2])
			}
			seen = tb.Stamp
			break
		}
		if time.Since(claimed) > 10*exp {
			t.Fatal("b's lease lapsed long ago and the table is still unchanged")
		}
	}
	step("nothing", false)
	// b stops renewing: its presence lapses, and changes the stamp once seen
	// lapsed.
	left := time.Now()
	for {
		time.Sleep(50 * time.Millisecond)
		tb := renew("a")
		if !tb.Unchanged {
			if time.Since(left) <= exp {
				t.Fatalf("the table changed %v after b's last renewal, before its presence could lapse", time.Since(left))
			}
			for _, m := range tb.Members {
				if m.ID == "b" {
					t.Fatalf("changed, but b still present: %v", tb.Members)
				}
			}
			seen = tb.Stamp
			break
		}
		if time.Since(left) > 10*exp {
			t.Fatal("b's presence lapsed long ago and the table is still unchanged")
		}
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := seen
	leases = nil
	tb = step("the data lost", true)
	if tb.Stamp == before {
		t.Fatalf("stamp %d after the data loss, as before it: a member could take the table for unchanged", tb.Stamp)
	}
	if tb, _, err := s.RenewSince(ctx, "a", parts, nil, 0); err != nil || tb.Unchanged {
		t.Fatalf("since 0: Unchanged = %v, %v; want a table read", tb.Unchanged, err)
	}
}

// A stamp read before a data loss must never match one read after it, or
// a member takes a table that changed for the one it read. A stamp raised
// like the epochs (the greater of stamp+1 and Redis's time in µs) grows by
// one while it runs ahead of Redis's clock (written by a primary whose
// clock ran ahead before a failover, or Redis's clock stepped back), and
// Redis restarting from a snapshot (or failing over to a replica) that
// lacks the last change would hand out the same stamp again for a
// different change.
func TestCountAfterADataLossNeverMatchesOneFromBefore(t *testing.T) {
	s, c := newStore(t, time.Minute)
	ctx := context.Background()
	parts := []int32{0, 1}
	const changes = "sluice:own:{ns/readings/g}:g"
	// A stamp an hour ahead of Redis's clock.
	if err := c.Set(ctx, changes, time.Now().Add(time.Hour).UnixMicro(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	tb, _, err := s.RenewSince(ctx, "a", parts, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot (or the replica) Redis comes back with.
	keys, err := c.Keys(ctx, "sluice:own:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	dumps := map[string]string{}
	for _, k := range keys {
		if dumps[k], err = c.Dump(ctx, k).Result(); err != nil {
			t.Fatal(err)
		}
	}
	// b claims partition 0; a reads it.
	if won, err := s.Claim(ctx, "b", []ownership.Claim{{Partition: 0, Version: tb.Owners[0].Version}}); err != nil || len(won) != 1 {
		t.Fatalf("b's claim: %v, %v", won, err)
	}
	tb, _, err = s.RenewSince(ctx, "a", parts, nil, tb.Stamp)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Unchanged || tb.Owners[0].Owner != "b" {
		t.Fatalf("after b's claim: %+v, want the table read with partition 0 owned by b", tb)
	}
	seen := tb.Stamp
	// Redis loses b's claim: it comes back with the snapshot.
	all, err := c.Keys(ctx, "sluice:own:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, all...).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range dumps {
		if err := c.Restore(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// c claims partition 1.
	if won, err := s.Claim(ctx, "c", []ownership.Claim{{Partition: 1, Version: 0}}); err != nil || len(won) != 1 {
		t.Fatalf("c's claim: %v, %v", won, err)
	}
	tb, _, err = s.RenewSince(ctx, "a", parts, nil, seen)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Unchanged {
		now := table(t, s, parts...)
		t.Fatalf("after the loss of b's claim and c's claim of partition 1: stamp %d, the one a read before the loss: the table (%+v, %+v) taken for the one a read (partition 0 owned by b, 1 free)",
			tb.Stamp, now.Owners[0], now.Owners[1])
	}
}

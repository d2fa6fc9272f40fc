package sensors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// storeMinute is the minute the store tests write.
var storeMinute = time.Date(2025, 11, 23, 12, 0, 0, 0, time.UTC)

// minuteOfHomes returns partition 2's minute of n homes, home i with
// first offset first+i and readings readings (motion readings, as many
// events).
func minuteOfHomes(n int, first int64, readings uint32) *flow.Windows[string, sensors.Minute] {
	panes := make([]flow.Pane[string, sensors.Minute], n)
	for i := range panes {
		panes[i] = pane(fmt.Sprintf("h%06d", i), first+int64(i),
			sensors.Minute{Events: [4]uint32{readings}, Readings: [4]uint32{readings}, Last: storeMinute.UnixMilli()})
	}
	return windows(2, storeMinute, panes...)
}

// TestStoreWriteKeepsTheCompleteAggregateInEveryOrder writes one
// partition's minute of more homes than one script call takes, in the
// versions a replay, an early close and a reassignment produce, in both
// orders, and checks that every home ends with the complete aggregate
// (lowest first offset, then most readings) and that the counts of
// written and kept add up.
func TestStoreWriteKeepsTheCompleteAggregateInEveryOrder(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	n := 2*sensors.HomesPerCall + 7
	complete := minuteOfHomes(n, 100, 3)
	replay := minuteOfHomes(n, 101, 2) // a replay from inside the minute misses the first reading
	early := minuteOfHomes(n, 100, 2)  // an early close misses the last
	calls := (n+sensors.HomesPerCall-1)/sensors.HomesPerCall + 1

	for _, tc := range []struct {
		name  string
		order []*flow.Windows[string, sensors.Minute]
		// written is what each write should store, in homes.
		written []int
	}{
		{"complete first", []*flow.Windows[string, sensors.Minute]{complete, replay, early, complete}, []int{n, 0, 0, 0}},
		{"replay then early then complete", []*flow.Windows[string, sensors.Minute]{replay, early, complete}, []int{n, n, n}},
		{"early then replay then complete", []*flow.Windows[string, sensors.Minute]{early, replay, complete, early}, []int{n, 0, n, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			store, err := sensors.NewStore(rdb, "store", 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, ws := range tc.order {
				res, err := store.Write(ctx, ws)
				if err != nil {
					t.Fatal(err)
				}
				if res.Written != tc.written[i] || res.Kept != n-tc.written[i] || res.Commands != calls {
					t.Errorf("write %d: %+v, want %d written, %d kept, %d calls", i, res, tc.written[i], n-tc.written[i], calls)
				}
			}
			for i := range n {
				home := fmt.Sprintf("h%06d", i)
				ms, err := store.Home(ctx, home)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) != 1 || ms[0].First != 100+int64(i) || ms[0].Count != 3 || ms[0].Value.Readings[0] != 3 {
					t.Fatalf("home %s: stored %+v, want first %d and 3 readings", home, ms, 100+i)
				}
			}
			ov, err := store.Overview(ctx, storeMinute, storeMinute)
			if err != nil {
				t.Fatal(err)
			}
			if len(ov) != 1 || ov[0].Homes != n || ov[0].Readings != uint32(3*n) {
				t.Errorf("overview %+v, want %d homes and %d readings", ov, n, 3*n)
			}
			if l, err := store.Latest(ctx); err != nil || !l.Equal(storeMinute) {
				t.Errorf("latest %v, %v; want %v", l, err, storeMinute)
			}
		})
	}
}

// TestStoreWriteAfterScriptFlush writes after redis-server forgot the
// script (a restart, SCRIPT FLUSH): the write loads it again and
// succeeds.
func TestStoreWriteAfterScriptFlush(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	store, err := sensors.NewStore(rdb, "flush", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Write(ctx, minuteOfHomes(3, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := store.Write(ctx, minuteOfHomes(3, 0, 2))
	if err != nil || res.Written != 3 {
		t.Fatalf("write after SCRIPT FLUSH: %+v, %v; want 3 written", res, err)
	}
}

// TestStoreTrimsMinutesPastRetentionAfterAGap: a home that reported
// nothing in some minute keeps reporting; the minute it reported a
// retention before that one must still go. The write deleted only the
// field exactly one retention older than the minute written, and set the
// hash's expiry again, so a home that was quiet that one minute kept the
// older one for as long as it reports, and its hash (which the page reads
// whole) grew for ever.
func TestStoreTrimsMinutesPastRetentionAfterAGap(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	store, err := sensors.NewStore(rdb, "trim", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	one := func(m time.Time) *flow.Windows[string, sensors.Minute] {
		return windows(1, m, pane("h1", m.Unix(), sensors.Minute{Readings: [4]uint32{1}, Last: m.UnixMilli()}))
	}
	t0 := storeMinute
	if _, err := store.Write(ctx, one(t0)); err != nil {
		t.Fatal(err)
	}
	// Quiet at t0 + 10 min, the minute that trims t0; reporting after,
	// for more minutes than the retention holds.
	for m := 11; m <= 25; m++ {
		if _, err := store.Write(ctx, one(t0.Add(time.Duration(m)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := store.Home(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !m.Start.After(t0.Add(15 * time.Minute)) {
			t.Errorf("minute %v still stored at %v: more than the retention (10 min) before the latest", m.Start, t0.Add(25*time.Minute))
		}
	}
}

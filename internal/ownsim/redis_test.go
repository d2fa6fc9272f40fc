package ownsim_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/ownsim"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// The simulation agrees with a real Redis: every scenario, run on 40
// instances sharing 512 partitions against a real redis-server in real
// time (interval 1 s, so that a loaded machine does not delay renewals
// past the self-fence deadline) and against the in-memory store in simulated
// time (same interval), has no overlap in either, reaches fair shares in
// both, and the rounds to fair and the moves of the two runs are within
// a tolerance: 3 rounds (or half the rounds), and 25% of the moves (or
// 10 partitions; 60% in a rolling restart, whose moves depend on where the
// others' rounds fall while a member restarts); settled, the records read a second agree within 25%
// (or 50 a second). Rounds are counted in intervals, which the two runs
// share; the Redis run's seconds are real and vary with the machine.
func TestRedisAgreesWithTheSimulation(t *testing.T) {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	cfg := ownsim.Config{Members: 40, Partitions: 512, Interval: time.Second, Settle: 3 * time.Second, Quiet: 10 * time.Second, Seed: 1}
	real := cfg
	real.Store = func(_ context.Context, run string, exp time.Duration) (ownership.Store, error) {
		return redisstore.New(redisstore.Config{Client: rc, Namespace: run, Stream: "s", Group: "g", Expiration: exp})
	}
	var mems, reds []ownsim.Result
	for _, sc := range ownsim.Scenarios {
		mem, err := ownsim.Run(context.Background(), cfg, sc)
		if err != nil {
			t.Fatal(err)
		}
		red, err := ownsim.Run(context.Background(), real, sc)
		if err != nil {
			t.Fatal(err)
		}
		mems, reds = append(mems, mem), append(reds, red)
		for _, r := range []ownsim.Result{mem, red} {
			store := map[bool]string{false: "memory", true: "redis"}[r.Real]
			if r.Overlaps != 0 {
				t.Errorf("%s, %s: %d overlaps (%.1f s)", sc, store, r.Overlaps, r.OverlapSeconds)
			}
			if !r.Fair {
				t.Errorf("%s, %s: the shares did not become fair", sc, store)
			}
		}
		if d := math.Abs(mem.RoundsToFair - red.RoundsToFair); d > max(3, mem.RoundsToFair/2) {
			t.Errorf("%s: %.1f rounds to fair in memory, %.1f with Redis", sc, mem.RoundsToFair, red.RoundsToFair)
		}
		tol := 0.25
		if sc == "rolling_restart" {
			// Who takes a restarting member's partitions depends on
			// where the others' rounds fall while it is away, which real
			// time jitters (76-137 moves over runs here).
			tol = 0.6
		}
		if d := math.Abs(float64(mem.Moved - red.Moved)); d > max(10, tol*float64(mem.Moved)) {
			t.Errorf("%s: %d moves in memory, %d with Redis", sc, mem.Moved, red.Moved)
		}
		if sc == "settled" { // the store's steady load: records read a second
			if m, r := mem.RowsPerSecond(), red.RowsPerSecond(); math.Abs(m-r) > max(50, 0.25*m) {
				t.Errorf("settled: %.0f records read a second in memory, %.0f with Redis", m, r)
			}
		}
	}
	var b []byte
	w := &sliceWriter{&b}
	fmt.Fprintln(w, "in memory, simulated time:")
	ownsim.WriteTable(w, mems)
	fmt.Fprintln(w, "redis-server, real time:")
	ownsim.WriteTable(w, reds)
	t.Log("\n" + string(b))
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

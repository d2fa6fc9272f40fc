package redisstream_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// A source restarted under its own name takes back more pending entries
// than one read takes, page after page, on any server that speaks the
// stream commands: a real redis-server, and the embedded server the demo
// runs on by default (which knows no exclusive "(" range start).
func TestRestartTakesBackPendingInPages(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"redis-server": func(t *testing.T) string { return testenv.Redis(t) },
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
	}
	for name, addr := range servers {
		t.Run(name, func(t *testing.T) {
			c := client(t, addr(t))
			produce(t, c, "jobs", 0, 25)
			cfg := redisstream.Config{Client: c, Streams: []string{"jobs"}, Group: "g", Consumer: "worker-1", Create: true,
				MinIdle: time.Hour, Block: 20 * time.Millisecond, MaxBatch: 4}
			first := run(t, newSource(t, cfg), false)
			first.await(t, "the first instance to read every entry", count(25))
			first.stop()

			src := newSource(t, cfg)
			second := run(t, src, true)
			second.await(t, "the second instance to take back every entry", count(25))
			seen := map[int]bool{}
			for _, m := range second.received() {
				seen[index(m.Value)] = true
			}
			if len(seen) != 25 {
				t.Fatalf("took back %d distinct entries of 25", len(seen))
			}
			if err := src.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the pending list to empty", func() bool {
				p, err := c.XPending(t.Context(), "jobs", "g").Result()
				return err == nil && p.Count == 0
			})
		})
	}
}

package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// A live source that works on its entries longer than MinIdle keeps them:
// it renews them, so another source reclaiming every 20 ms never takes
// one. Once it stops (a dead consumer: nothing renews its entries), the
// other takes them all after MinIdle, as redeliveries.
func TestReclaimSparesLiveConsumersAndTakesDeadOnes(t *testing.T) {
	c := client(t, testenv.Redis(t))
	const n = 50
	produce(t, c, "jobs", 0, n)
	const minIdle = time.Second
	cfg := func(consumer string) redisstream.Config {
		return redisstream.Config{Client: c, Streams: []string{"jobs"}, Group: "g", Consumer: consumer, Create: true,
			MinIdle: minIdle, ClaimEvery: 20 * time.Millisecond, Block: 50 * time.Millisecond}
	}
	busySrc := newSource(t, cfg("busy"))
	busy := run(t, busySrc, false) // never settles: works on its entries for ever
	busy.await(t, "the busy source to read every entry", count(n))
	other := run(t, newSource(t, cfg("other")), true)

	// Four times MinIdle, as the busy source's entries age: none may move.
	deadline := time.Now().Add(4 * minIdle)
	for time.Now().Before(deadline) {
		for id, owner := range pendingIDs(t, c, "jobs", "g") {
			if owner != "busy" {
				t.Fatalf("entry %s moved to %s while its live owner worked on it", id, owner)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := len(other.received()); got != 0 {
		t.Fatalf("the other source received %d entries the busy one was working on", got)
	}

	busy.stop() // dead: its pipeline gone, closed, its entries stay pending, unrenewed
	if err := busySrc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	other.await(t, "the other source to take over every entry", count(n))
	for _, m := range other.received() {
		if m.Attempt != 1 {
			t.Fatalf("entry %q taken over with Attempt %d, want 1", m.Value, m.Attempt)
		}
	}
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "jobs", "g")) == 0 })
}

// Consumers of the group idle with nothing pending are removed; one with
// entries pending is kept, and so is the source itself, however idle.
func TestIdleConsumersAreRemoved(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, "tasks", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "tasks", 0, 1)
	if err := c.XGroupCreateConsumer(ctx, "tasks", "g", "gone").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "holding", Streams: []string{"tasks", ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"tasks"}, Group: "g", Consumer: "me",
		MinIdle: time.Hour, ClaimEvery: 20 * time.Millisecond, DeleteIdleConsumers: time.Millisecond, Block: 50 * time.Millisecond})
	r := run(t, src, true)
	consumers := func() map[string]int64 {
		cs, err := c.XInfoConsumers(ctx, "tasks", "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, x := range cs {
			m[x.Name] = x.Pending
		}
		return m
	}
	waitFor(t, "the idle consumer with nothing pending to be removed", func() bool { _, ok := consumers()["gone"]; return !ok })
	produce(t, c, "tasks", 1, 1)
	r.await(t, "an entry read after the removal", count(1))
	time.Sleep(100 * time.Millisecond) // a few more rounds of removal
	r.stop()
	cs := consumers()
	if cs["holding"] != 1 {
		t.Errorf("consumers %v: the one with an entry pending was removed", cs)
	}
	if _, ok := cs["me"]; !ok {
		t.Errorf("consumers %v: the source removed itself", cs)
	}
}

// Restarted under the same name, a source takes back its own pending
// entries first, as redeliveries, and only then reads new ones.
func TestRestartTakesBackOwnPendingFirst(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "mail", 0, 10)
	cfg := redisstream.Config{Client: c, Streams: []string{"mail"}, Group: "g", Consumer: "worker-1", Create: true,
		MinIdle: time.Hour, Block: 20 * time.Millisecond}
	first := run(t, newSource(t, cfg), false)
	first.await(t, "the first instance to read every entry", count(10))
	first.stop()
	produce(t, c, "mail", 10, 10)

	src := newSource(t, cfg)
	second := run(t, src, true)
	second.await(t, "the second instance to read old and new entries", count(20))
	for k, m := range second.received() {
		old := k < 10
		if old != (index(m.Value) < 10) || old != (m.Attempt == 1) {
			t.Fatalf("arrival %d: entry %s with Attempt %d; want the 10 old entries first, as second deliveries, then the new ones",
				k, m.Value, m.Attempt)
		}
	}
	if st := src.Stats().Streams[0]; st.Reclaimed != 10 || st.Read != 20 {
		t.Fatalf("stats %+v, want 20 read of which 10 taken back", st)
	}
}

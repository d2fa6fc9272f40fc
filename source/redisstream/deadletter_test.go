package redisstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// fieldsOf reads the entries of a stream as they are stored: ID and
// fields in order.
func fieldsOf(t *testing.T, c redis.UniversalClient, name string) (ids []string, fields [][]string) {
	t.Helper()
	res, err := c.Do(context.Background(), "XRANGE", name, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", name, err)
	}
	for _, e := range res {
		pair := e.([]any)
		ids = append(ids, pair[0].(string))
		var fs []string
		for _, f := range pair[1].([]any) {
			fs = append(fs, f.(string))
		}
		fields = append(fields, fs)
	}
	return ids, fields
}

// pendingIDs returns the group's pending entries: ID -> consumer.
func pendingIDs(t *testing.T, c redis.UniversalClient, name, group string) map[string]string {
	t.Helper()
	ps, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: name, Group: group, Start: "-", End: "+", Count: 10_000}).Result()
	if err != nil {
		t.Fatalf("XPENDING %s: %v", name, err)
	}
	m := map[string]string{}
	for _, p := range ps {
		m[p.ID] = p.Consumer
	}
	return m
}

// header returns the value of field "h:"+name in fields, or "".
func header(fields []string, name string) string {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "h:"+name {
			return fields[i+1]
		}
	}
	return ""
}

// An entry delivered more often than MaxDeliveries (twice to consumers
// that crashed, once more to the source) goes to the dead-letter stream
// with its count, the reason and its original fields in their order, and
// is acknowledged; an entry delivered no more than that is processed.
func TestPoisonEntryIsDeadLettered(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, "orders", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	poison, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{"value", "boom", "key", "k1", "h:trace", "t1", "h:trace", "t2"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, c, "orders", 1, 1)
	// Delivered once to a consumer that crashed, then the poison entry
	// once more to another.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "crashed", Streams: []string{"orders", ">"}, Count: 10, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.XClaim(ctx, &redis.XClaimArgs{Stream: "orders", Group: "g", Consumer: "crashed-too", Messages: []string{poison}}).Err(); err != nil {
		t.Fatal(err)
	}

	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"orders"}, Group: "g", Consumer: "live",
		MinIdle: 50 * time.Millisecond, ClaimEvery: 20 * time.Millisecond, MaxDeliveries: 2, Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the entry delivered once before", count(1))
	waitFor(t, "the dead letter", func() bool {
		ids, _ := fieldsOf(t, c, "orders-dead-letters")
		return len(ids) == 1
	})
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "orders", "g")) == 0 })
	r.stop()

	got := r.received()
	if len(got) != 1 || string(got[0].Value) != "1" || got[0].Attempt != 1 {
		t.Fatalf("received %d messages (%v), want only the entry \"1\" with Attempt 1", len(got), got)
	}
	_, dl := fieldsOf(t, c, "orders-dead-letters")
	want := []string{"value", "boom", "key", "k1", "h:trace", "t1", "h:trace", "t2"}
	if strings.Join(dl[0][:len(want)], " ") != strings.Join(want, " ") {
		t.Fatalf("dead letter fields %q, want the original %q first", dl[0], want)
	}
	for name, v := range map[string]string{
		"sluice-deliveries":   "3",
		"sluice-reason":       "delivered 3 times, more than MaxDeliveries 2",
		"sluice-source-topic": "orders",
		"sluice-source-id":    poison,
		"sluice-stage":        "redis-stream", // the stage's name once a metrics package instrumented it
	} {
		if got := header(dl[0], name); got != v {
			t.Errorf("header %s = %q, want %q", name, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339, header(dl[0], "sluice-failed-at")); err != nil {
		t.Errorf("sluice-failed-at: %v", err)
	}
	if header(dl[0], "sluice-source-offset") == "" {
		t.Error("no sluice-source-offset header")
	}
	st := src.Stats().Streams[0]
	if st.Poison != 1 || st.DeadLettered != 1 || st.Reclaimed != 1 || st.Acked != 1 {
		t.Errorf("stats %+v, want 1 poison, 1 dead-lettered, 1 reclaimed, 1 acked", st)
	}
}

// An entry without the value field is dead-lettered with its original
// fields and the reason, acknowledged, and the entries around it are
// processed.
func TestEntryWithoutValueIsDeadLettered(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	produce(t, c, "events", 0, 1)
	bad, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: []any{"data", "x", "h:trace", "t9"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	produce(t, c, "events", 1, 1)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"events"}, Group: "g", Consumer: "c", Create: true,
		DeadLetter: "bad-events", Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "both good entries", count(2))
	waitFor(t, "the dead letter", func() bool { ids, _ := fieldsOf(t, c, "bad-events"); return len(ids) == 1 })
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "events", "g")) == 0 })
	r.stop()
	_, dl := fieldsOf(t, c, "bad-events")
	if strings.Join(dl[0][:4], " ") != "data x h:trace t9" {
		t.Fatalf("dead letter %q, want the original fields first", dl[0])
	}
	if want := fmt.Sprintf("entry %s has no field \"value\"", bad); header(dl[0], "sluice-reason") != want {
		t.Fatalf("reason %q, want %q", header(dl[0], "sluice-reason"), want)
	}
	if header(dl[0], "sluice-deliveries") != "1" {
		t.Fatalf("deliveries %q, want 1", header(dl[0], "sluice-deliveries"))
	}
	for _, m := range r.received() {
		if m.Attempt != 0 || m.Topic != "events" {
			t.Errorf("message %q: attempt %d topic %q, want 0 and events", m.Value, m.Attempt, m.Topic)
		}
	}
}

// An entry this source holds is never dead-lettered under it: when its
// own take-over pass claims it back (idle past MinIdle, as when the
// renewal could not reach Redis) with more deliveries than MaxDeliveries,
// it is still in flight here and stays so, to be acknowledged when its
// message is settled.
func TestHeldEntryIsNotDeadLetteredUnderItsOwner(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	produce(t, c, "held", 0, 1)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"held"}, Group: "g", Consumer: "c", Create: true,
		MinIdle: time.Hour, ClaimEvery: 20 * time.Millisecond, MaxDeliveries: 2, Block: 20 * time.Millisecond})
	r := run(t, src, false)
	r.await(t, "the entry", count(1))
	id := redisentry.ID(r.received()[0].Offset)
	// As if its renewal had failed for two hours, after many deliveries.
	if err := c.Do(ctx, "XCLAIM", "held", "g", "c", 0, id, "IDLE", 2*time.Hour.Milliseconds(), "RETRYCOUNT", 50, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the source's take-over pass to claim the entry", func() bool {
		if n, _ := c.XLen(ctx, "held-dead-letters").Result(); n > 0 {
			return true
		}
		ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "held", Group: "g", Start: id, End: id, Count: 1}).Result()
		return err == nil && len(ps) == 1 && ps[0].RetryCount > 50
	})
	if n, _ := c.XLen(ctx, "held-dead-letters").Result(); n != 0 {
		t.Fatalf("%d dead letters of an entry in flight here", n)
	}
	r.received()[0].Settle(stream.Completed)
	waitFor(t, "the entry acknowledged", func() bool { return len(pendingIDs(t, c, "held", "g")) == 0 })
	if st := src.Stats().Streams[0]; st.Poison != 0 || st.Read != 1 {
		t.Fatalf("stats %+v, want 1 read and no poison", st)
	}
}

package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// A dead letter that cannot be written (its key holds a string, not a
// stream) does not acknowledge the entry: it stays pending, to be
// dead-lettered once the key is fixed, and is neither lost nor processed.
func TestDeadLetterRefusedKeepsEntryPending(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	if err := c.Set(ctx, "bad-events", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: []any{"data", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"events"}, Group: "g", Consumer: "c", Create: true,
		DeadLetter: "bad-events", Block: 50 * time.Millisecond})
	r := run(t, src, true)
	err = <-r.done
	r.done <- err
	if err == nil {
		t.Fatal("Run returned nil with a dead-letter key of the wrong type")
	}
	if got := pendingIDs(t, c, "events", "g"); got[bad] != "c" {
		t.Fatalf("after the dead letter was refused (%v), pending = %v: entry %s neither dead-lettered nor pending, lost", err, got, bad)
	}
}

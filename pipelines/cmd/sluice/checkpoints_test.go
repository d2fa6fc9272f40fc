package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

func TestCheckpointsListAndSet(t *testing.T) {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	store, err := redisstore.New(redisstore.Config{Client: rc, Namespace: "sluice", Stream: "readings", Group: "g", Expiration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	won, err := store.Claim(ctx, "worker-1", []ownership.Claim{{Partition: 2}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	if outs, err := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 1234, Sequence: -1}}); err != nil || outs[0] != ownership.Accepted {
		t.Fatalf("checkpoint: %v %v", outs, err)
	}
	var out bytes.Buffer
	if err := runCheckpoints(ctx, []string{"list", "-redis", addr, "-stream", "readings", "-group", "g", "-partitions", "4"}, &out); err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "2 ") {
			row = l
		}
	}
	if f := strings.Fields(row); len(f) < 6 || f[1] != "1234" || !strings.Contains(row, "worker-1") || f[len(f)-2] != strconv.FormatInt(won[0].Epoch, 10) {
		t.Fatalf("partition 2's row %q (want offset 1234, written by and owned by worker-1, epoch %d):\n%s", row, won[0].Epoch, out.String())
	}

	out.Reset()
	if err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-stream", "readings", "-group", "g", "-partitions", "4",
		"-partition", "2", "-offset", "100"}, &out); err != nil {
		t.Fatal(err)
	}
	cks, err := store.Checkpoints(ctx, []int32{2})
	if err != nil || cks[0].Offset != 100 {
		t.Fatalf("after set: %+v %v", cks, err)
	}
	// The owner is fenced: its next checkpoint under its epoch is refused.
	if outs, _ := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 1300, Sequence: -1}}); outs[0] != ownership.Fenced {
		t.Fatalf("the old owner's checkpoint after a rewind: %v, want fenced", outs[0])
	}
	for _, bad := range [][]string{
		{"set", "-redis", addr, "-stream", "readings", "-group", "g"},
		{"list", "-redis", addr, "-group", "g"},
		{"set", "-redis", addr, "-stream", "readings", "-group", "g", "-partitions", "4", "-partition", "9", "-offset", "1"},
	} {
		if err := runCheckpoints(ctx, bad, &out); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

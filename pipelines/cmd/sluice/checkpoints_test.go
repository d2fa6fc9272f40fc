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

// A rewind under a namespace, stream or group no worker uses (the default
// namespace "sluice" against workers configured with "prod") is refused,
// naming what to check, instead of setting a checkpoint nobody reads;
// with the right namespace it fences the owner; -new gives a start before
// any worker ran.
func TestCheckpointsSetRefusesAGroupNobodyUses(t *testing.T) {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	store, _ := redisstore.New(redisstore.Config{Client: rc, Namespace: "prod", Stream: "readings", Group: "sensors", Expiration: time.Minute})
	ctx := context.Background()
	won, err := store.Claim(ctx, "worker-1", []ownership.Claim{{Partition: 3}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	if outs, err := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 5000, Sequence: -1}}); err != nil || outs[0] != ownership.Accepted {
		t.Fatalf("checkpoint: %v %v", outs, err)
	}
	var out bytes.Buffer
	err = runCheckpoints(ctx, []string{"set", "-redis", addr, "-stream", "readings", "-group", "sensors", "-partition", "3", "-offset", "1000"}, &out)
	if err == nil || !strings.Contains(err.Error(), "-namespace") || !strings.Contains(err.Error(), `"sluice"`) {
		t.Fatalf("set under the default namespace: %v, want an error naming -namespace", err)
	}
	if err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-namespace", "prod", "-stream", "readings", "-group", "sensors",
		"-partition", "3", "-offset", "1000"}, &out); err != nil {
		t.Fatal(err)
	}
	cks, _ := store.Checkpoints(ctx, []int32{3})
	outs, _ := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 5001, Sequence: -1}})
	if cks[0].Offset != 1000 || outs[0] != ownership.Fenced {
		t.Fatalf("rewind: checkpoint %d (want 1000), the owner's next write %v (want fenced)", cks[0].Offset, outs[0])
	}
	if err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-namespace", "prod", "-stream", "readings", "-group", "new-group",
		"-partition", "0", "-offset", "7", "-new"}, &out); err != nil {
		t.Fatalf("-new: %v", err)
	}
}

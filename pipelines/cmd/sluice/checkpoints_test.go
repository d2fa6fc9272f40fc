package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
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
	if err := runCheckpoints(ctx, []string{"list", "-redis", addr, "-stream", "readings", "-group", "g", "-partitions", "4"}, &out, &out); err != nil {
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
		"-partition", "2", "-offset", "100"}, &out, &out); err != nil {
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
		if err := runCheckpoints(ctx, bad, &out, &out); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// A rewind under a namespace, stream or group no worker uses ("sluice"
// against workers configured with "prod") is refused, naming what to check
// and what Redis holds, instead of setting a checkpoint nobody reads;
// without -namespace it finds the one in use and fences the owner; -new
// gives a start before any worker ran.
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
	err = runCheckpoints(ctx, []string{"set", "-redis", addr, "-namespace", "sluice", "-stream", "readings", "-group", "sensors",
		"-partition", "3", "-offset", "1000"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "check -namespace") || !strings.Contains(err.Error(), "-namespace prod -stream readings -group sensors") {
		t.Fatalf("set under a namespace nobody uses: %v, want an error naming -namespace and the one in use", err)
	}
	// Without -namespace, the one holding the stream's and group's records.
	if err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-stream", "readings", "-group", "sensors",
		"-partition", "3", "-offset", "1000"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	cks, _ := store.Checkpoints(ctx, []int32{3})
	outs, _ := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 5001, Sequence: -1}})
	if cks[0].Offset != 1000 || outs[0] != ownership.Fenced {
		t.Fatalf("rewind: checkpoint %d (want 1000), the owner's next write %v (want fenced)", cks[0].Offset, outs[0])
	}
	if err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-namespace", "prod", "-stream", "readings", "-group", "new-group",
		"-partition", "0", "-offset", "7", "-new"}, &out, &out); err != nil {
		t.Fatalf("-new: %v", err)
	}
}

// The sensors worker keeps its checkpoints under its own namespace
// ("sensors"): a listing given its stream and group, and no -namespace,
// shows them, not the empty rows of another namespace.
func TestCheckpointsListFindsTheWorkersNamespace(t *testing.T) {
	addr := testenv.Redis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	store, err := redisstore.New(redisstore.Config{Client: rc, Namespace: sensors.DefaultNamespace, Stream: sensors.DefaultTopic,
		Group: sensors.DefaultGroup, Expiration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	won, err := store.Claim(ctx, "worker-1", []ownership.Claim{{Partition: 1}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	if outs, err := store.Checkpoint(ctx, "worker-1", []ownership.Write{{Lease: won[0], Offset: 4321, Sequence: -1}}); err != nil || outs[0] != ownership.Accepted {
		t.Fatalf("checkpoint: %v %v", outs, err)
	}
	var out, errOut bytes.Buffer
	if err := runCheckpoints(ctx, []string{"list", "-redis", addr, "-stream", sensors.DefaultTopic, "-group", sensors.DefaultGroup,
		"-partitions", "4"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^1 +4321 `).MatchString(out.String()) || errOut.Len() > 0 {
		t.Fatalf("partition 1's checkpoint 4321 is not listed:\n%s\nstderr: %s", out.String(), errOut.String())
	}

	// A listing of a group with no record says so on stderr, naming what
	// Redis holds.
	out.Reset()
	if err := runCheckpoints(ctx, []string{"list", "-redis", addr, "-stream", sensors.DefaultTopic, "-group", "other",
		"-partitions", "4"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("-namespace %s -stream %s -group %s", sensors.DefaultNamespace, sensors.DefaultTopic, sensors.DefaultGroup)
	if !strings.Contains(errOut.String(), "no ownership record or checkpoint") || !strings.Contains(errOut.String(), want) {
		t.Fatalf("listing a group with no record: stderr %q, want a note naming %q", errOut.String(), want)
	}

	// Records of the stream and group under two namespaces: which one is
	// for the operator to say.
	other, _ := redisstore.New(redisstore.Config{Client: rc, Namespace: "staging", Stream: sensors.DefaultTopic, Group: sensors.DefaultGroup,
		Expiration: time.Minute})
	if _, err := other.Claim(ctx, "worker-2", []ownership.Claim{{Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	err = runCheckpoints(ctx, []string{"list", "-redis", addr, "-stream", sensors.DefaultTopic, "-group", sensors.DefaultGroup}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "-namespace") || !strings.Contains(err.Error(), "staging") {
		t.Fatalf("two namespaces: %v, want an error asking for -namespace", err)
	}
}

// Without -namespace, a write finds every namespace holding records of the
// stream and group, slashes in their names or not: with two, it asks which
// rather than moving the checkpoint of one it guessed.
func TestCheckpointsSetAsksWhichNamespaceWhenTwoHoldTheStreamWithASlash(t *testing.T) {
	for _, c := range []struct{ other, stream string }{
		{"staging", "plant/readings"}, // a slash in the stream
		{"team/a", "readings"},        // a slash in the namespace
	} {
		addr := testenv.Redis(t)
		rc := redis.NewClient(&redis.Options{Addr: addr})
		ctx := context.Background()
		for i, ns := range []string{sensors.DefaultNamespace, c.other} {
			store, err := redisstore.New(redisstore.Config{Client: rc, Namespace: ns, Stream: c.stream, Group: "g", Expiration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			won, err := store.Claim(ctx, fmt.Sprintf("worker-%d", i), []ownership.Claim{{Partition: 0}})
			if err != nil || len(won) != 1 {
				t.Fatalf("claim: %v %v", won, err)
			}
			if outs, err := store.Checkpoint(ctx, fmt.Sprintf("worker-%d", i), []ownership.Write{{Lease: won[0], Offset: 1000, Sequence: -1}}); err != nil || outs[0] != ownership.Accepted {
				t.Fatalf("checkpoint: %v %v", outs, err)
			}
		}
		var out bytes.Buffer
		err := runCheckpoints(ctx, []string{"set", "-redis", addr, "-stream", c.stream, "-group", "g", "-partitions", "4",
			"-partition", "0", "-offset", "5"}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "-namespace") || !strings.Contains(err.Error(), c.other) {
			t.Fatalf("namespaces %q and %q both hold stream %q: set said %v (%q), want an error asking for -namespace",
				sensors.DefaultNamespace, c.other, c.stream, err, out.String())
		}
		rc.Close()
	}
}

package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

// redisCommandCalls returns how many times Redis ran each command, those
// run inside scripts included (INFO commandstats).
func redisCommandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// Once the shares are even and nothing changes, a renewal reads the
// records of the leases it renews, not the whole table: with hundreds of
// members over thousands of partitions, reading every partition's record
// in every member's every renewal is what loads Redis's one thread most
// (9.5 ms of Redis's time a renewal at 4,096 partitions).
func TestSteadyRenewalsReadOnlyTheLeasesHeld(t *testing.T) {
	const members, partitions = 4, 256
	const interval, expiration = 100 * time.Millisecond, 600 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { c.Close() })
	var ids []string
	for i := range members {
		ids = append(ids, fmt.Sprint("m", i))
	}
	srcs, bals := startRedisMembers(t, c, ids, partitions, interval, expiration)
	even := func() bool {
		seen := map[int32]int{}
		for _, f := range srcs {
			n := len(f.owned())
			if n < partitions/members || n > partitions/members+1 {
				return false
			}
			for _, p := range f.owned() {
				seen[p]++
			}
		}
		return len(seen) == partitions
	}
	deadline := time.Now().Add(30 * time.Second)
	for !even() {
		if time.Now().After(deadline) {
			t.Fatal("the shares were not even after 30 s")
		}
		time.Sleep(interval)
	}
	rounds := func() (n int64) {
		for _, b := range bals {
			n += b.Stats().Rounds
		}
		return n
	}
	time.Sleep(3 * interval) // the last claims' effects read by every member
	r0, c0 := rounds(), redisCommandCalls(t, c)
	time.Sleep(20 * interval)
	r1, c1 := rounds(), redisCommandCalls(t, c)
	renewals := r1 - r0
	if renewals < members {
		t.Fatalf("only %d renewals in 20 intervals", renewals)
	}
	reads := c1["hmget"] - c0["hmget"]
	// Each renewal reads its member's leases (partitions/members) and
	// nothing else; an occasional full read (one in many rounds) is allowed
	// for, a full read every round is not.
	if limit := renewals*partitions/members + 2*partitions; reads > limit {
		t.Fatalf("%d renewals read %d records (%.0f each); want at most %d: every renewal reads the whole table of %d partitions",
			renewals, reads, float64(reads)/float64(renewals), limit, partitions)
	}
	t.Logf("%d renewals read %d records (%.1f each)", renewals, reads, float64(reads)/float64(renewals))
}

// startRedisMembers starts a balancer of a fake source of partitions for
// each id, over redisstore on c, each in a pipeline of its own; they are
// stopped and closed when the test ends.
func startRedisMembers(t *testing.T, c *redis.Client, ids []string, partitions int, interval, expiration time.Duration) ([]*fakeSource, []*ownership.Balancer[int]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var srcs []*fakeSource
	var bals []*ownership.Balancer[int]
	done := make(chan struct{}, len(ids))
	for _, id := range ids {
		store, err := redisstore.New(redisstore.Config{Client: c, Stream: "s", Group: "g", Expiration: expiration})
		if err != nil {
			t.Fatal(err)
		}
		f := newFake(partitions)
		b, err := ownership.NewBalancer[int](store, f, ownership.Config{ID: id, Interval: interval, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		srcs, bals = append(srcs, f), append(bals, b)
		g := stream.New(stream.WithLogger(quiet))
		stream.To(stream.From(g, stream.Source[int](b)), stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
			_, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}))
		go func() { _ = g.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for range bals {
			<-done
		}
		for _, b := range bals {
			_ = b.Close(context.Background())
		}
	})
	return srcs, bals
}

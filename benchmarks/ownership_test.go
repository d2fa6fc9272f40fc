package benchmarks

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

// busySource stands for a source that always makes progress: every
// partition it runs reports a higher settled offset at each look, so that
// every commit writes every partition's checkpoint (the most Redis work).
type busySource struct {
	parts []int32
	mu    sync.Mutex
	run   map[int32]bool
	off   atomic.Int64
}

func (s *busySource) Run(ctx context.Context, _ *stream.Outlet[[]byte]) error {
	<-ctx.Done()
	return nil
}
func (s *busySource) Partitions(context.Context) ([]int32, error) { return s.parts, nil }
func (s *busySource) Start(p int32, _ int64)                      { s.mu.Lock(); s.run[p] = true; s.mu.Unlock() }
func (s *busySource) Stop(p int32)                                { s.mu.Lock(); delete(s.run, p); s.mu.Unlock() }
func (s *busySource) Settled(p int32) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.off.Add(1), s.run[p]
}

// BenchmarkOwnershipRedisLoad runs instances sharing partitions through a
// real redis-server, renewing every second and checkpointing every
// partition every second, and reports the commands Redis served per
// second once the shares are settled: script calls (one round trip each)
// and all commands, those the scripts run included (target < 50 script
// calls/s at 10 x 16), and the CPU time redis-server spent per second.
// members=50,partitions=1024 and 100,4096 are larger groups' settled
// loads.
func BenchmarkOwnershipRedisLoad(b *testing.B) {
	b.Run("members=10,partitions=16", func(b *testing.B) { ownershipRedisLoad(b, 10, 16) })
	b.Run("members=50,partitions=1024", func(b *testing.B) { ownershipRedisLoad(b, 50, 1024) })
	b.Run("members=100,partitions=4096", func(b *testing.B) { ownershipRedisLoad(b, 100, 4096) })
}

func ownershipRedisLoad(b *testing.B, instances, partitions int) {
	const window = 10 * time.Second
	addr := testenv.Redis(b)
	for b.Loop() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * instances})
		quiet := slog.New(slog.DiscardHandler)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var bals []*ownership.Balancer[[]byte]
		for i := range instances {
			store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: fmt.Sprint("load", b.N), Stream: "s", Group: "g",
				Expiration: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			src := &busySource{run: map[int32]bool{}}
			for p := range partitions {
				src.parts = append(src.parts, int32(p))
			}
			bal, err := ownership.NewBalancer[[]byte](store, src, ownership.Config{ID: fmt.Sprint("i", i), Interval: time.Second, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			bals = append(bals, bal)
			g := stream.New(stream.WithLogger(quiet))
			stream.To(stream.From(g, stream.Source[[]byte](bal)), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
				<-ctx.Done()
				return nil
			}))
			wg.Add(2)
			go func() { defer wg.Done(); _ = g.Run(ctx) }()
			go func() { // the checkpoint sink's committer, every second
				defer wg.Done()
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						_ = bal.Commit(ctx)
					}
				}
			}()
		}
		// Settle: every partition owned by one instance, shares even.
		deadline := time.Now().Add(120 * time.Second)
		for {
			owned, most := 0, 0
			for _, bal := range bals {
				n := len(bal.Owned())
				owned += n
				most = max(most, n)
			}
			if owned == partitions && most <= partitions/instances+1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("not settled after 120 s: %d partitions owned", owned)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // every member has read the settled table
		calls0, all0 := redisCalls(b, rdb)
		cpu0 := redisCPU(b, rdb)
		time.Sleep(window)
		calls1, all1 := redisCalls(b, rdb)
		cpu1 := redisCPU(b, rdb)
		cancel()
		wg.Wait()
		for _, bal := range bals {
			_ = bal.Close(context.Background())
		}
		rdb.Close()
		b.ReportMetric(float64(calls1-calls0)/window.Seconds(), "script_calls/s")
		b.ReportMetric(float64(all1-all0)/window.Seconds(), "commands/s")
		b.ReportMetric((cpu1-cpu0).Seconds()*1000/window.Seconds(), "redis_cpu_ms/s")
	}
	b.ReportMetric(0, "ns/op")
}

// redisCalls returns the script calls (EVALSHA and EVAL) and all the
// commands Redis has served, from INFO commandstats.
func redisCalls(b *testing.B, rdb *redis.Client) (scripts, all int64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += n
		}
		if name != "cmdstat_info" {
			all += n
		}
	}
	return scripts, all
}

// BenchmarkOwnershipRenewal measures what one renewal costs Redis's
// thread (INFO commandstats: the scripts' time), with 500 instances
// present and 4,096 partitions, the renewing instance holding 8 leases:
// whole_table is a renewal that reads every partition's record (the table
// changed since its last read), unchanged one that finds the table's stamp
// as it was and reads only the leases it renews.
func BenchmarkOwnershipRenewal(b *testing.B) {
	const members, partitions, held = 500, 4096, 8
	addr := testenv.Redis(b)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	store, err := redisstore.New(redisstore.Config{Client: rdb, Stream: "s", Group: "g", Expiration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	parts := make([]int32, partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	tb, _, err := store.RenewSince(ctx, "me", parts, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	var claims []ownership.Claim
	for i := range held {
		claims = append(claims, ownership.Claim{Partition: int32(i), Version: tb.Owners[i].Version})
	}
	leases, err := store.Claim(ctx, "me", claims)
	if err != nil || len(leases) != held {
		b.Fatalf("claim: %v, %v", leases, err)
	}
	for i := range members - 1 {
		if _, _, err := store.RenewSince(ctx, fmt.Sprint("m", i), nil, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		since func(last int64) int64
	}{{"whole_table", func(int64) int64 { return 0 }}, {"unchanged", func(last int64) int64 { return last }}} {
		b.Run(c.name, func(b *testing.B) {
			tb, _, err := store.RenewSince(ctx, "me", parts, leases, 0)
			if err != nil {
				b.Fatal(err)
			}
			last := tb.Stamp
			usec0 := scriptMicros(b, rdb)
			n := 0
			for b.Loop() {
				tb, _, err := store.RenewSince(ctx, "me", parts, leases, c.since(last))
				if err != nil {
					b.Fatal(err)
				}
				if c.name == "unchanged" && !tb.Unchanged {
					b.Fatal("the table changed under an unchanged renewal")
				}
				last = tb.Stamp
				n++
			}
			b.ReportMetric(float64(scriptMicros(b, rdb)-usec0)/float64(n), "redis_us/renewal")
		})
	}
}

// scriptMicros returns the microseconds Redis has spent in scripts
// (EVALSHA and EVAL, INFO commandstats).
func scriptMicros(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				us += n
			}
		}
	}
	return us
}

package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// BenchmarkStepRecords measures what recording a step that must not run
// twice costs the worker, against a real redis-server: marking it started
// (SET NX GET with a TTL) and recording it done (SET KEEPTTL), from
// callers making them at once. sluice is delivery.RedisSteps, which
// sends what callers make together in one pipeline; by_hand is the two
// commands sent by each caller itself on the same client, as the worker
// written by hand does. cpu_us/step is this process's CPU per step (the
// server's is not counted), in the same run for both.
func BenchmarkStepRecords(b *testing.B) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(b), PoolSize: 128})
	defer cl.Close()
	const ttl = time.Hour
	var run atomic.Int64
	byHand := func(ctx context.Context, id string) error {
		key := "hand:" + id
		_, err := cl.SetArgs(ctx, key, "s:mark", redis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		return cl.SetArgs(ctx, key, "d:drone-1", redis.SetArgs{KeepTTL: true}).Err()
	}
	steps := delivery.NewRedisSteps(cl, ttl)
	defer steps.Close()
	withSteps := func(ctx context.Context, id string) error {
		st, err := steps.Begin(ctx, id, delivery.StepDrone, "mark")
		if err != nil {
			return err
		}
		if st.Done || st.StartedBy != "" {
			return fmt.Errorf("step of %s found %+v, want no record", id, st)
		}
		return steps.Record(ctx, id, delivery.StepDrone, "drone-1")
	}
	for _, callers := range []int{1, 4, 64} {
		for _, impl := range []struct {
			name string
			step func(context.Context, string) error
		}{{"by_hand", byHand}, {"sluice", withSteps}} {
			b.Run(fmt.Sprintf("%s/%d", impl.name, callers), func(b *testing.B) {
				prefix := fmt.Sprintf("r%d-", run.Add(1))
				var next atomic.Int64
				var failed atomic.Value
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpuTime()
				t0 := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							if err := impl.step(ctx, fmt.Sprint(prefix, i)); err != nil {
								failed.CompareAndSwap(nil, err)
								return
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(t0)
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1000/float64(b.N), "cpu_us/step")
				b.ReportMetric(float64(b.N)/el.Seconds(), "steps/s")
			})
		}
	}
}

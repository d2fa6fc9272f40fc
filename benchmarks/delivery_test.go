package benchmarks

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
)

// BenchmarkDeliveryPipeline runs the whole drone delivery system in one
// process (kfake with 16 partitions, simulated backends with steps of
// 2-10 ms and 1% transient faults) at fixed request rates for 10 s each,
// then one 10 s burst at twice the rate the machine sustains (80,000/s). Each run
// reports the completed rate, end-to-end p50/p99 (produce to settle), the
// highest consumer lag, how long after the load the backlog drained, and
// whether the verification passed (lost 0, nothing applied twice).
func BenchmarkDeliveryPipeline(b *testing.B) {
	for _, rate := range []float64{10_000, 20_000, 30_000, 40_000, 50_000} {
		b.Run(fmt.Sprintf("sustained_%dk", int(rate/1000)), func(b *testing.B) {
			var sum demo.Summary
			for b.Loop() {
				sum = deliveryRun(b, rate, "", 10*time.Second)
			}
			reportDelivery(b, sum)
		})
	}
	// Mode b: the drone service is not idempotent; step records in a real
	// redis-server (started here on a loopback port) make replays skip it.
	for _, rate := range []float64{10_000, 20_000, 30_000, 40_000} {
		b.Run(fmt.Sprintf("redis_steps_%dk", int(rate/1000)), func(b *testing.B) {
			addr := testenv.Redis(b)
			rc := redis.NewClient(&redis.Options{Addr: addr})
			defer rc.Close()
			var sum demo.Summary
			for b.Loop() {
				_, cmds0 := redisCalls(b, rc)
				cpu0 := redisCPU(b, rc)
				sum = deliveryRun(b, rate, addr, 10*time.Second)
				_, cmds1 := redisCalls(b, rc)
				b.ReportMetric(float64(cmds1-cmds0)/float64(max(1, sum.Sent)), "redis_cmds/req")
				b.ReportMetric(float64((redisCPU(b, rc)-cpu0).Microseconds())/float64(max(1, sum.Sent)), "redis_cpu_us/req")
			}
			reportDelivery(b, sum)
		})
	}
	// A 10 s burst at twice the highest rate sustained above: the backlog
	// builds in Kafka (lag) and must drain within 30 s, with nothing lost.
	// The requests are 10% high, 30% normal, 60% low, a topic each, read
	// weighted 6:3:1: high_p99_ms is high's end-to-end p99 (the scheduler's
	// budget: 500 ms) while the low topic takes the lag.
	b.Run("burst_80k_10s", func(b *testing.B) {
		var sum demo.Summary
		for b.Loop() {
			sum = deliveryRun(b, 80_000, "", 10*time.Second)
		}
		reportDelivery(b, sum)
	})
	// The same with 256 calls in flight per step instead of 1,024: on two
	// cores the calls beyond what the CPUs serve only wait for one, first
	// come first served whatever their level.
	b.Run("burst_80k_10s_par256", func(b *testing.B) {
		var sum demo.Summary
		for b.Loop() {
			sum = deliveryRun(b, 80_000, "", 10*time.Second, func(c *demo.Config) { c.Parallelism = 256 })
		}
		reportDelivery(b, sum)
	})
}

func deliveryRun(b *testing.B, rate float64, redis string, d time.Duration, opts ...func(*demo.Config)) demo.Summary {
	cfg := demo.Defaults(d)
	for _, o := range opts {
		o(&cfg)
	}
	cfg.Redis = redis
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery, cfg.BurstFor = rate, 0, 0, 0
	cfg.Every, cfg.Drain = -1, 60*time.Second
	cpu0 := cpuTime()
	sum, err := demo.Run(context.Background(), cfg, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(sum.Sent), "cpu_us/req")
	if !sum.OK() {
		b.Fatalf("verification failed: %s", sum)
	}
	return sum
}

// cpuTime is the CPU time the process used so far (user + system): the
// whole system runs in this process, so CPU per request is the cost of the
// pipeline, the embedded broker, the load generator and the simulated
// services together — a steadier figure than a saturated rate on a noisy
// machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportDelivery(b *testing.B, s demo.Summary) {
	b.ReportMetric(float64(s.Completed)/s.Elapsed.Seconds(), "completed/s")
	b.ReportMetric(float64(s.P50.Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(s.P99.Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(s.MaxLag), "max_lag")
	b.ReportMetric(s.Drained.Seconds(), "drain_s")
	b.ReportMetric(float64(s.Lost), "lost")
	for l, name := range delivery.LevelNames {
		b.ReportMetric(float64(s.Levels[l].P99.Microseconds())/1000, name+"_p99_ms")
	}
	b.ReportMetric(0, "ns/op")
}

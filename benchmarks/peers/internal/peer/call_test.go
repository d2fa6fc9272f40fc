package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkCallLoop is the peers benchmark's workload alone: 256
// goroutines making Call(2 ms) one after the other, no Kafka and no
// consumer. Its calls/s is the most any implementation can make on this
// machine now (256 / 2 ms = 128,000 only if a 2 ms wait took 2 ms); its
// mean_wait_ms is what a 2 ms wait takes with 256 in flight.
//
//	cd benchmarks/peers/internal/peer && go test -run '^$' -bench CallLoop -benchtime 300000x .
func BenchmarkCallLoop(b *testing.B) {
	const inflight, work = 256, 2 * time.Millisecond
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var waited atomic.Int64 // ns
	var wg sync.WaitGroup
	b.ResetTimer()
	for range inflight {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				if err := Call(ctx, work); err != nil {
					b.Error(err)
					return
				}
				waited.Add(int64(time.Since(t0)))
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(waited.Load())/float64(b.N)/1e6, "mean_wait_ms")
	b.ReportMetric(0, "ns/op")
}

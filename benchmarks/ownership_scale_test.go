package benchmarks

import (
	"context"
	"testing"

	"github.com/sluice-streams/sluice/internal/ownsim"
)

// BenchmarkOwnershipScale runs each scenario of internal/ownsim (docs/
// ownership-scale.md) with 500 instances sharing 4,096 partitions, the
// real balancer in simulated time over an in-memory store with the Redis
// scripts' semantics (interval 10 s, expiration 30 s), and reports what
// users ask of it: overlaps (must be 0), rounds and seconds to fair
// shares, moves beyond the fewest needed, steals, self-fences, and the
// store's calls and records read per second per member. One op is one
// whole scenario. Seed 1, as `sluice simulate ownership`'s default: the
// same figures as its table.
func BenchmarkOwnershipScale(b *testing.B) {
	for _, sc := range ownsim.Scenarios {
		b.Run(sc, func(b *testing.B) {
			var r ownsim.Result
			for b.Loop() {
				var err error
				r, err = ownsim.Run(context.Background(), ownsim.Config{Members: 500, Partitions: 4096, Seed: 1}, sc)
				if err != nil {
					b.Fatal(err)
				}
			}
			if !r.Fair {
				b.Errorf("%s: the shares did not become fair within the limit", sc)
			}
			b.ReportMetric(float64(r.Overlaps), "overlaps")
			b.ReportMetric(r.OverlapSeconds, "overlap_s")
			b.ReportMetric(r.RoundsToFair, "rounds_to_fair")
			b.ReportMetric(r.SecondsToFair, "s_to_fair")
			b.ReportMetric(float64(r.Moved), "moved")
			b.ReportMetric(float64(r.ExcessMoves), "excess_moves")
			b.ReportMetric(float64(r.Steals), "steals")
			b.ReportMetric(float64(r.SelfFences), "self_fences")
			b.ReportMetric(float64(r.ClaimsLost), "claims_lost")
			b.ReportMetric(r.OpsPerSecond(), "store_ops/s")
			b.ReportMetric(r.PerMember(r.OpsPerSecond()), "store_ops/s/member")
			b.ReportMetric(r.RowsPerSecond(), "rows_read/s")
			b.ReportMetric(r.PerMember(r.RowsPerSecond()), "rows_read/s/member")
			b.Logf("%s: %.1f s of real time for %.0f s simulated", sc, r.Elapsed.Seconds(), r.Seconds)
		})
	}
}

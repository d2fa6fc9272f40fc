// Package quantile computes quantiles of recorded durations for the
// workers' status lines and summaries.
package quantile

import (
	"slices"
	"time"
)

// Of sorts s (if it is not sorted) and returns its q-quantile, 0 for an
// empty s.
func Of(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// All sorts s and returns its qs-quantiles.
func All(s []time.Duration, qs ...float64) []time.Duration {
	slices.Sort(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = Of(s, q)
	}
	return out
}

package peer

import (
	"math/bits"
	"sync/atomic"
)

// subBits gives each power of two 128 buckets: a quantile is off by less
// than 1%.
const (
	subBits = 7
	sub     = 1 << subBits
	buckets = (64 - subBits) * sub
)

// Histogram is a log-linear histogram of durations in microseconds (the
// layout of HdrHistogram): Record is one atomic add, so many goroutines
// can record at once.
type Histogram struct {
	n [buckets]atomic.Int64
}

// Record adds a duration of ns nanoseconds (negative counts as 0).
func (h *Histogram) Record(ns int64) {
	h.n[index(uint64(max(ns, 0))/1000)].Add(1)
}

func index(us uint64) int {
	if us < 2*sub {
		return int(us)
	}
	shift := bits.Len64(us) - (subBits + 1)
	return (shift+1)*sub + int(us>>shift) - sub
}

// lower returns the smallest value of bucket i, in microseconds.
func lower(i int) uint64 {
	if i < 2*sub {
		return uint64(i)
	}
	shift := i/sub - 1
	return uint64(i%sub+sub) << shift
}

// Quantile returns the q-quantile in nanoseconds: the middle of the
// bucket holding it; 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) int64 {
	var total int64
	for i := range h.n {
		total += h.n[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := int64(q*float64(total-1)) + 1
	var seen int64
	for i := range h.n {
		if seen += h.n[i].Load(); seen >= rank {
			lo, hi := lower(i), lower(i+1)
			return int64(lo+hi) / 2 * 1000
		}
	}
	return 0
}

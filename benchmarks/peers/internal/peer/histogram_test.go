package peer

import (
	"math"
	"testing"
)

func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for _, us := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 2500, 1 << 20, 1<<40 + 12345} {
		i := index(us)
		if i < prev {
			t.Fatalf("index(%d) = %d, below the previous %d", us, i, prev)
		}
		prev = i
		if lo, hi := lower(i), lower(i+1); us < lo || us >= hi {
			t.Fatalf("%d us in bucket %d of [%d, %d)", us, i, lo, hi)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	for us := int64(1); us <= 10_000; us++ {
		h.Record(us * 1000)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 5000}, {0.99, 9900}, {1, 10_000}} {
		got := float64(h.Quantile(c.q)) / 1000
		if math.Abs(got-c.want)/c.want > 0.01 {
			t.Errorf("quantile %v = %v us, want %v within 1%%", c.q, got, c.want)
		}
	}
}

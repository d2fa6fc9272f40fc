package deployed

import (
	"math"
	"testing"
)

// Quantiles interpolate within the bucket that holds them, as PromQL's
// histogram_quantile does, and two incarnations' histograms add up.
func TestHistogramQuantile(t *testing.T) {
	h := Histogram{0.1: 50, 0.2: 98, 0.4: 100, math.Inf(1): 100}
	for _, c := range []struct{ q, want float64 }{{0.25, 0.05}, {0.5, 0.1}, {0.74, 0.15}, {0.99, 0.3}, {1, 0.4}} {
		if got := h.Quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", c.q, got, c.want)
		}
	}
	h.Add(Histogram{0.1: 0, 0.2: 0, 0.4: 0, math.Inf(1): 100}) // 100 more beyond the last bound
	if got := h.Quantile(0.99); got != 0.4 {
		t.Errorf("q0.99 with half the samples beyond the last bound = %v, want that bound, 0.4", got)
	}
	if got := (Histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

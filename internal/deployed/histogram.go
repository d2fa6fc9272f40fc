package deployed

import (
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histogram is a Prometheus histogram read from a worker's /metrics:
// cumulative counts by upper bound, summed over every series of the name.
type Histogram map[float64]float64

// Scrape reads the histogram name from the incarnation's /metrics.
func (w *Worker) Scrape(name string) (Histogram, error) {
	fams, err := w.families()
	if err != nil {
		return nil, err
	}
	h := Histogram{}
	if f, ok := fams[name]; ok {
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) { // the text format has it; the count is the same
					h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
			h[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return h, nil
}

// Add adds o's counts to h (two incarnations' histograms).
func (h Histogram) Add(o Histogram) {
	for k, v := range o {
		h[k] += v
	}
}

// Quantile estimates the q-quantile, interpolating linearly within the
// bucket that holds it (as PromQL's histogram_quantile does); NaN if h is
// empty.
func (h Histogram) Quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 || h[bounds[len(bounds)-1]] == 0 {
		return math.NaN()
	}
	total := h[bounds[len(bounds)-1]]
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		c := h[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return lo // beyond the last bound: the last bound is all we know
			}
			if c == below {
				return b
			}
			return lo + (b-lo)*(rank-below)/(c-below)
		}
		lo, below = b, c
	}
	return lo
}

// Counter reads the sum of the counter name's series from the
// incarnation's /metrics whose labels include every pair of match.
func (w *Worker) Counter(name string, match map[string]string) (float64, error) {
	fams, err := w.families()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range match {
			ok = ok && got[k] == v
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

// families reads the incarnation's /metrics.
func (w *Worker) families() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + w.Listen + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

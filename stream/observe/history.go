package observe

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-streams/sluice/stream"
)

// Default history: a sample every 2 s, 15 minutes kept.
const (
	DefaultHistoryInterval = 2 * time.Second
	DefaultHistoryWindow   = 15 * time.Minute
	// MaxHistorySeries bounds the series a History keeps (the stages,
	// partitions, breakers and levels of its pipelines, a few numbers
	// each): beyond it new series are not recorded. With the defaults a
	// series takes 450 samples of 8 bytes, so the history holds at most
	// about 7 MB, and a pipeline of 40 stages and 50 partitions about 1 MB.
	MaxHistorySeries = 2000
	// maxHistorySamples bounds the samples of a series, whatever the
	// window and interval.
	maxHistorySamples = 3600
)

// Kinds of history series.
const (
	SeriesReceived  = "received"  // messages a stage took from its input, per second
	SeriesHandled   = "handled"   // messages a stage handed on, settled or failed, per second: its throughput
	SeriesInFlight  = "in_flight" // messages a stage holds
	SeriesBuffered  = "buffered"  // messages waiting in front of a stage
	SeriesLatency   = "latency"   // end-to-end latency quantile (Name "p50", "p99"), seconds
	SeriesLag       = "lag"       // a partition's lag (Name "topic/partition"), records
	SeriesBreaker   = "breaker"   // a breaker's state (Name: its dependency): 0 closed, 1 half open, 2 open
	SeriesOutcome   = "outcome"   // messages leaving the pipeline per second, by outcome (Name), and "failed"
	SeriesLevel     = "level"     // a number of one level of priority (Stage, Level, Name: the metric)
	latencyP50Name  = "p50"
	latencyP99Name  = "p99"
	breakerClosed   = 0
	breakerHalfOpen = 1
	breakerOpen     = 2
)

// History samples the pipelines' numbers at a fixed interval and keeps the
// last window of them in memory: a ring of samples per series, bounded by
// MaxHistorySeries. Counters are kept as rates over each interval.
type History struct {
	graphs   []*stream.Graph
	current  func() []*stream.Graph // if set, the graphs now (ServerConfig.GraphsFunc)
	metrics  []*Metrics
	interval time.Duration
	size     int

	mu     sync.Mutex
	times  []float64 // unix seconds, a ring of size slots
	next   int       // slot of the next sample
	n      int       // samples held
	series map[seriesKey]*series
	order  []seriesKey
	prev   map[seriesKey]float64 // counters at the last sample
	prevAt time.Time
	hists  map[string]*dto.Histogram // the latency histogram at the last sample, by pipeline
	last   map[stageKey]float64      // the latest throughput of each stage (handled per second)
}

type seriesKey struct {
	pipeline, kind, stage, level, name string
}

type stageKey struct{ pipeline, stage string }

type series struct {
	v    []float64 // a ring aligned with History.times; NaN: no value
	seen int       // samples since the series last had a value
}

// NewHistory returns a history of the pipelines gs, with the numbers of ms
// (matched to gs by pipeline name), sampled every interval and kept for
// window (defaults: DefaultHistoryInterval, DefaultHistoryWindow), 3600
// samples at most.
// Sample it with Sample, or Run it.
func NewHistory(gs []*stream.Graph, ms []*Metrics, interval, window time.Duration) *History {
	if interval <= 0 {
		interval = DefaultHistoryInterval
	}
	if window <= 0 {
		window = DefaultHistoryWindow
	}
	size := min(max(2, int(window/interval)), maxHistorySamples)
	return &History{graphs: gs, metrics: ms, interval: interval, size: size, times: make([]float64, size),
		series: map[seriesKey]*series{}, prev: map[seriesKey]float64{}, hists: map[string]*dto.Histogram{},
		last: map[stageKey]float64{}}
}

// pipelines returns the graphs to sample and show now.
func (h *History) pipelines() []*stream.Graph {
	if h.current != nil {
		return h.current()
	}
	return h.graphs
}

// Interval returns the time between samples.
func (h *History) Interval() time.Duration { return h.interval }

// Run samples every interval until done is closed.
func (h *History) Run(done <-chan struct{}) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	h.Sample(time.Now())
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			h.Sample(now)
		}
	}
}

// Sample reads every number once, as of now. The first sample gives no
// rates (there is nothing to take a difference from).
func (h *History) Sample(now time.Time) {
	vals := map[seriesKey]float64{}
	counters := map[seriesKey]float64{}
	hists := map[string]*dto.Histogram{}
	gs := h.pipelines()
	for _, g := range gs {
		p := g.Name()
		var out [stream.DeadLettered + 1]int64
		var failed int64
		stats := g.Stats()
		for _, s := range stats {
			counters[seriesKey{p, SeriesReceived, s.Name, "", ""}] = float64(s.In)
			counters[seriesKey{p, SeriesHandled, s.Name, "", ""}] = float64(s.Out + s.Settled + s.Failed)
			vals[seriesKey{p, SeriesInFlight, s.Name, "", ""}] = float64(s.InFlight())
			if s.Capacity > 0 {
				vals[seriesKey{p, SeriesBuffered, s.Name, "", ""}] = float64(s.Buffered)
			}
			for o := stream.Filtered; o <= stream.DeadLettered; o++ {
				out[o] += s.SettledBy[o]
			}
			failed += s.Failed
		}
		for o := stream.Filtered; o <= stream.DeadLettered; o++ {
			counters[seriesKey{p, SeriesOutcome, "", "", o.String()}] = float64(out[o])
		}
		counters[seriesKey{p, SeriesOutcome, "", "", "failed"}] = float64(failed)
		for _, m := range h.metrics {
			if m == nil || m.pipeline != p {
				continue
			}
			var d dto.Metric
			if err := m.latency.Write(&d); err == nil && d.Histogram != nil {
				hists[p] = d.Histogram
			}
			m.sample(p, stats, vals, counters)
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	dt := now.Sub(h.prevAt).Seconds()
	first := h.prevAt.IsZero() || dt <= 0
	for k, v := range counters {
		if pv, ok := h.prev[k]; ok && !first && v >= pv {
			vals[k] = (v - pv) / dt
		}
	}
	for p, cur := range hists {
		if before := h.hists[p]; before != nil && !first {
			if q, ok := quantile(0.5, before, cur); ok {
				vals[seriesKey{p, SeriesLatency, "", "", latencyP50Name}] = q
			}
			if q, ok := quantile(0.99, before, cur); ok {
				vals[seriesKey{p, SeriesLatency, "", "", latencyP99Name}] = q
			}
		}
	}
	h.prev, h.prevAt, h.hists = counters, now, hists
	clear(h.last)
	for k, v := range vals {
		if k.kind == SeriesHandled {
			h.last[stageKey{k.pipeline, k.stage}] = v
		}
	}

	slot := h.next
	h.times[slot] = float64(now.UnixMilli()) / 1000
	h.next = (h.next + 1) % h.size
	h.n = min(h.n+1, h.size)
	added := make([]seriesKey, 0)
	for k := range vals {
		if _, ok := h.series[k]; !ok {
			added = append(added, k)
		}
	}
	// New series in a stable order: by pipeline, kind, then the order of
	// the pipeline's stages, then name.
	rank := map[stageKey]int{}
	for _, g := range gs {
		if len(added) == 0 {
			break
		}
		for i, st := range g.Stats() {
			rank[stageKey{g.Name(), st.Name}] = i
		}
	}
	slices.SortFunc(added, func(a, b seriesKey) int {
		return cmp.Or(cmp.Compare(a.pipeline, b.pipeline), cmp.Compare(kindRank[a.kind], kindRank[b.kind]),
			cmp.Compare(rank[stageKey{a.pipeline, a.stage}], rank[stageKey{b.pipeline, b.stage}]),
			cmp.Compare(a.stage, b.stage), cmp.Compare(len(a.level), len(b.level)), cmp.Compare(a.level, b.level),
			naturalCompare(a.name, b.name))
	})
	// Beyond the bound, the first in that order are kept (a stage's
	// numbers before the lag of its partitions).
	added = added[:max(0, min(len(added), MaxHistorySeries-len(h.series)))]
	for _, k := range added {
		s := &series{v: make([]float64, h.size)}
		for i := range s.v {
			s.v[i] = math.NaN()
		}
		h.series[k] = s
		h.order = append(h.order, k)
	}
	kept := h.order[:0]
	for _, k := range h.order {
		s := h.series[k]
		if v, ok := vals[k]; ok {
			s.v[slot], s.seen = v, 0
		} else {
			s.v[slot] = math.NaN()
			s.seen++
		}
		if s.seen >= h.size { // no value in the whole window: gone
			delete(h.series, k)
			continue
		}
		kept = append(kept, k)
	}
	h.order = kept
}

// kindRank orders the kinds of series: within the bound of series, the
// stages' and the pipeline's own numbers come before those that grow with
// the partitions and levels.
var kindRank = map[string]int{SeriesHandled: 0, SeriesReceived: 1, SeriesInFlight: 2, SeriesBuffered: 3, SeriesLatency: 4,
	SeriesOutcome: 5, SeriesBreaker: 6, SeriesLevel: 7, SeriesLag: 8}

// throughput returns the latest handled rate of a stage and whether there
// is one yet.
func (h *History) throughput(pipeline, stage string) (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.last[stageKey{pipeline, stage}]
	return v, ok
}

// quantile estimates the q quantile of the observations made between two
// readings of a histogram, interpolating within the bucket it falls in.
func quantile(q float64, before, now *dto.Histogram) (float64, bool) {
	total := float64(now.GetSampleCount() - before.GetSampleCount())
	if total <= 0 || len(now.Bucket) != len(before.Bucket) {
		return 0, false
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range now.Bucket {
		n := float64(b.GetCumulativeCount() - before.Bucket[i].GetCumulativeCount())
		upper := b.GetUpperBound()
		if n >= rank {
			if n == below {
				return upper, true
			}
			return lower + (upper-lower)*(rank-below)/(n-below), true
		}
		lower, below = upper, n
	}
	return lower, true // beyond the last bucket: its bound
}

// sample adds the numbers of m's components to vals (gauges) and counters:
// the lag of each partition, each breaker's state, and the numbers of each
// level of priority.
func (m *Metrics) sample(pipeline string, stats []stream.StageStats, vals, counters map[seriesKey]float64) {
	m.mu.Lock()
	fs := slices.Clone(m.collect)
	m.mu.Unlock()
	w := &historyWriter{pipeline: pipeline, vals: vals, counters: counters}
	for _, f := range fs {
		f(w)
	}
	name := m.levelNamer(stats, w.levels)
	for _, l := range w.levels {
		into := vals
		if l.counter {
			into = counters
		}
		into[seriesKey{pipeline, SeriesLevel, l.stage, name(l.prio), trimPrefix(l.name)}] = l.v
	}
}

// historyWriter is the stream.MetricWriter of a sample.
type historyWriter struct {
	pipeline       string
	vals, counters map[seriesKey]float64
	levels         []levelValue
}

// levelValue is a number of one level of priority of one stage.
type levelValue struct {
	stage, prio, name string
	v                 float64
	counter           bool
}

func (w *historyWriter) Counter(name, _ string, v float64, labels ...stream.Label) {
	w.level(name, v, labels, true)
}

func (w *historyWriter) Gauge(name, _ string, v float64, labels ...stream.Label) {
	var stage, topic, partition, dep, state string
	for _, l := range labels {
		switch l.Name {
		case "stage":
			stage = l.Value
		case "topic":
			topic = l.Value
		case "partition":
			partition = l.Value
		case "dependency":
			dep = l.Value
		case "state":
			state = l.Value
		}
	}
	switch {
	case strings.HasSuffix(name, "_lag") && partition != "":
		if topic == "" {
			topic = stage
		}
		w.vals[seriesKey{w.pipeline, SeriesLag, "", "", topic + "/" + partition}] = v
		return
	case name == "sluice_breaker_state" && dep != "":
		if v == 1 {
			code := breakerClosed
			switch state {
			case "half_open":
				code = breakerHalfOpen
			case "open":
				code = breakerOpen
			}
			w.vals[seriesKey{w.pipeline, SeriesBreaker, "", "", dep}] = float64(code)
		}
		return
	}
	w.level(name, v, labels, false)
}

// level records a number of one level of priority of one stage.
func (w *historyWriter) level(name string, v float64, labels []stream.Label, counter bool) {
	stage, prio, ok := levelLabels(labels)
	if !ok {
		return
	}
	w.levels = append(w.levels, levelValue{stage: stage, prio: prio, name: name, v: v, counter: counter})
}

// HistorySeries is one series of /history.json: Values line up with
// HistoryStatus.Times; null where the series had no value.
type HistorySeries struct {
	Kind   string `json:"kind"`
	Stage  string `json:"stage,omitempty"`
	Level  string `json:"level,omitempty"`
	Name   string `json:"name,omitempty"`
	Values values `json:"values"`
}

// HistoryPipeline is one pipeline's series.
type HistoryPipeline struct {
	Name   string          `json:"name"`
	Series []HistorySeries `json:"series"`
}

// HistoryStatus is what /history.json returns: the samples' times (unix
// seconds, oldest first) and every pipeline's series.
type HistoryStatus struct {
	IntervalSeconds float64           `json:"interval_seconds"`
	WindowSeconds   float64           `json:"window_seconds"`
	Times           []float64         `json:"times"`
	Pipelines       []HistoryPipeline `json:"pipelines"`
}

// values encodes NaN as null.
type values []float64

func (vs values) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 8*len(vs)+2)
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b = append(b, "null"...)
			continue
		}
		b = strconv.AppendFloat(b, v, 'g', 6, 64)
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads null as NaN.
func (vs *values) UnmarshalJSON(b []byte) error {
	var raw []*float64
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*vs = make(values, len(raw))
	for i, p := range raw {
		(*vs)[i] = math.NaN()
		if p != nil {
			(*vs)[i] = *p
		}
	}
	return nil
}

// Snapshot returns the samples held, oldest first.
func (h *History) Snapshot() HistoryStatus {
	gs := h.pipelines()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := HistoryStatus{IntervalSeconds: h.interval.Seconds(), WindowSeconds: (time.Duration(h.size) * h.interval).Seconds(),
		Times: make([]float64, 0, h.n)}
	start := (h.next - h.n + h.size) % h.size
	for i := range h.n {
		st.Times = append(st.Times, h.times[(start+i)%h.size])
	}
	at := map[string]int{}
	for _, g := range gs {
		if _, ok := at[g.Name()]; !ok {
			at[g.Name()] = len(st.Pipelines)
			st.Pipelines = append(st.Pipelines, HistoryPipeline{Name: g.Name(), Series: []HistorySeries{}})
		}
	}
	for _, k := range h.order {
		s := h.series[k]
		vs := make(values, 0, h.n)
		for i := range h.n {
			vs = append(vs, s.v[(start+i)%h.size])
		}
		i, ok := at[k.pipeline]
		if !ok {
			continue
		}
		st.Pipelines[i].Series = append(st.Pipelines[i].Series, HistorySeries{Kind: k.kind, Stage: k.stage, Level: k.level, Name: k.name, Values: vs})
	}
	return st
}

// Package observe makes a running pipeline visible: Prometheus metrics
// (registered on a registry the caller gives, never only the global one),
// health and readiness endpoints, and a live /status page that draws the
// pipeline's stages with their throughput, in-flight messages and buffer
// fill, and charts of the last 15 minutes kept in memory (History).
//
// Register a pipeline once (Metrics.Register): every stage's counters are
// exported, the engine reports durations for the histograms, and every
// source, flow or sink that publishes numbers of its own (a
// stream.Instrumented: the Kafka source, asynchronous stages and their
// circuit breakers and retry budgets, the checkpoint sink) is found and
// instrumented. This package knows Prometheus and the stream package,
// nothing else: the components know their numbers. Most numbers are read
// from the components' own counters when Prometheus scrapes, so they cost
// nothing between scrapes.
//
// docs/metrics.md lists every metric with its labels and example alerts.
package observe

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/stream"
)

// Metrics collects a pipeline's metrics, labelled with its name.
type Metrics struct {
	pipeline string
	reg      prometheus.Registerer

	processing *prometheus.HistogramVec
	latency    prometheus.Histogram

	mu         sync.Mutex
	g          *stream.Graph // the pipeline registered
	levelNames []string      // NameLevels
	graphs     bool          // a pipeline is registered
	collect    []func(w stream.MetricWriter)
	hists      map[string]*histogram
	included   map[any]bool
	errs       []error

	descMu sync.Mutex
	descs  map[string]*prometheus.Desc
}

type histogram struct {
	vec    *prometheus.HistogramVec
	labels []string
}

// New creates the metrics of the pipeline named pipeline and registers
// them on reg.
func New(reg prometheus.Registerer, pipeline string) (*Metrics, error) {
	pl := prometheus.Labels{"pipeline": pipeline}
	m := &Metrics{
		pipeline: pipeline,
		reg:      reg,
		processing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_stage_processing_seconds", ConstLabels: pl,
			Help:    "Time a stage spends per message, measured per batch (receive to next receive, time blocked downstream included).",
			Buckets: prometheus.ExponentialBuckets(1e-8, 4, 16),
		}, []string{"stage"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_end_to_end_latency_seconds", ConstLabels: pl,
			Help:    "Time from a message's timestamp (the record's, for Kafka) to its settle.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		hists:    map[string]*histogram{},
		included: map[any]bool{},
		descs:    map[string]*prometheus.Desc{},
	}
	for _, c := range []prometheus.Collector{m.processing, m.latency, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Register exports the pipeline g: every stage's counters, the durations
// the engine measures, and the numbers of every source, flow and sink of g
// that publishes its own (stream.Instrumented), with their parts (an
// asynchronous stage's breaker and budget). A Metrics exports one
// pipeline: call it once, after building the pipeline and before Run. A
// pipeline already running is refused, and so is a registration whose
// series would clash with others (two breakers of one Name, say): every
// scrape would fail.
func (m *Metrics) Register(g *stream.Graph) error {
	m.mu.Lock()
	taken := m.graphs
	m.graphs = true
	m.mu.Unlock()
	if taken {
		return fmt.Errorf("sluice: metrics: pipeline %q: this Metrics exports a pipeline already (create one per pipeline with observe.New)", g.Name())
	}
	if err := g.AddObserver(observer{m}); err != nil {
		m.mu.Lock()
		m.graphs = false
		m.mu.Unlock()
		return err
	}
	m.mu.Lock()
	m.g = g
	m.mu.Unlock()
	return m.checked(func() {
		m.graph(g)
		for _, p := range g.Parts() {
			if c, ok := p.Value.(stream.Instrumented); ok {
				m.include(c, p.Stage)
			}
		}
	})
}

// Instrument exports a component that is not a stage of a registered
// pipeline (a breaker used inside a custom stage), named stage. A
// component already instrumented (the same pointer) is not counted twice.
func (m *Metrics) Instrument(stage string, c stream.Instrumented) error {
	return m.checked(func() { m.include(c, stage) })
}

// checked runs a registration, then reads every series once: if two carry
// the same name and labels, the registration's collectors are taken back
// and the clash is returned.
func (m *Metrics) checked(register func()) error {
	m.mu.Lock()
	before := len(m.collect)
	m.mu.Unlock()
	register()
	if err := m.err(); err != nil {
		return err
	}
	m.mu.Lock()
	fs := slices.Clone(m.collect)
	m.mu.Unlock()
	seen := &keys{}
	for _, f := range fs {
		f(seen)
	}
	if len(seen.dup) == 0 {
		return nil
	}
	m.mu.Lock()
	m.collect = m.collect[:before]
	m.mu.Unlock()
	return fmt.Errorf("sluice: metrics: series published twice (two components with one name?): %s", strings.Join(seen.dup, ", "))
}

// keys is a stream.MetricWriter that records the series written and the
// ones written twice.
type keys struct {
	seen map[string]bool
	dup  []string
}

func (k *keys) write(name string, labels []stream.Label) {
	if k.seen == nil {
		k.seen = map[string]bool{}
	}
	key := name
	for _, l := range labels {
		key += fmt.Sprintf(",%s=%q", l.Name, l.Value)
	}
	if k.seen[key] {
		k.dup = append(k.dup, key)
	}
	k.seen[key] = true
}

func (m *Metrics) err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := errors.Join(m.errs...)
	m.errs = nil
	return err
}

// include instruments c once: a pointer already included is skipped (two
// stages sharing a breaker export it once).
func (m *Metrics) include(c stream.Instrumented, stage string) {
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer {
		m.mu.Lock()
		seen := m.included[c]
		m.included[c] = true
		m.mu.Unlock()
		if seen {
			return
		}
	}
	c.Instrument(stage, meter{m})
}

// meter is the stream.Meter a component is given.
type meter struct{ m *Metrics }

func (mt meter) Collect(f func(w stream.MetricWriter)) {
	mt.m.mu.Lock()
	mt.m.collect = append(mt.m.collect, f)
	mt.m.mu.Unlock()
}

func (mt meter) Include(part stream.Instrumented, stage string) { mt.m.include(part, stage) }

func (mt meter) Histogram(name, help string, buckets []float64, labels ...stream.Label) func(float64) {
	if o := mt.histogram(name, help, buckets, labels); o != nil {
		return o.Observe
	}
	return func(float64) {}
}

// HistogramWithExemplars is Histogram whose observations made with a trace
// id keep it as the bucket's exemplar, {trace_id="..."}, served on
// /metrics in the OpenMetrics format (ServerConfig.OpenMetrics,
// stream.ExemplarMeter).
func (mt meter) HistogramWithExemplars(name, help string, buckets []float64, labels ...stream.Label) func(float64, string) {
	o := mt.histogram(name, help, buckets, labels)
	if o == nil {
		return func(float64, string) {}
	}
	return func(v float64, traceID string) { observeInTrace(o, v, traceID) }
}

// observeInTrace observes v with traceID as its exemplar, if there is one.
func observeInTrace(o prometheus.Observer, v float64, traceID string) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && traceID != "" {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": traceID})
		return
	}
	o.Observe(v)
}

// histogram returns the observer of the histogram name with labels,
// registering it the first time; nil (and an error kept for Register) if
// it cannot.
func (mt meter) histogram(name, help string, buckets []float64, labels []stream.Label) prometheus.Observer {
	m := mt.m
	names, values := split(labels)
	m.mu.Lock()
	h, ok := m.hists[name]
	if !ok {
		h = &histogram{labels: names, vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: buckets, ConstLabels: prometheus.Labels{"pipeline": m.pipeline},
		}, names)}
		if err := m.reg.Register(h.vec); err != nil {
			m.errs = append(m.errs, fmt.Errorf("sluice: metrics: histogram %s: %w", name, err))
			m.mu.Unlock()
			return nil
		}
		m.hists[name] = h
	}
	m.mu.Unlock()
	if !slices.Equal(h.labels, names) {
		m.mu.Lock()
		m.errs = append(m.errs, fmt.Errorf("sluice: metrics: histogram %s: labels %v, registered with %v", name, names, h.labels))
		m.mu.Unlock()
		return nil
	}
	return h.vec.WithLabelValues(values...)
}

func split(labels []stream.Label) (names, values []string) {
	names, values = make([]string, len(labels)), make([]string, len(labels))
	for i, l := range labels {
		names[i], values[i] = l.Name, l.Value
	}
	return names, values
}

// Describe sends nothing: the collector is unchecked, its metrics depend on
// what is registered with it.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads every registered component's numbers.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	fs := slices.Clone(m.collect)
	m.mu.Unlock()
	w := writer{m: m, ch: ch}
	for _, f := range fs {
		f(w)
	}
}

func (k *keys) Counter(name, _ string, _ float64, labels ...stream.Label) { k.write(name, labels) }
func (k *keys) Gauge(name, _ string, _ float64, labels ...stream.Label)   { k.write(name, labels) }

// writer is the stream.MetricWriter of one scrape.
type writer struct {
	m  *Metrics
	ch chan<- prometheus.Metric
}

func (w writer) Counter(name, help string, v float64, labels ...stream.Label) {
	w.write(prometheus.CounterValue, name, help, v, labels)
}

func (w writer) Gauge(name, help string, v float64, labels ...stream.Label) {
	w.write(prometheus.GaugeValue, name, help, v, labels)
}

func (w writer) write(t prometheus.ValueType, name, help string, v float64, labels []stream.Label) {
	names, values := split(labels)
	w.ch <- prometheus.MustNewConstMetric(w.m.desc(name, help, names), t, v, values...)
}

// desc returns the description of a metric with the pipeline label and
// the given variable labels, made once.
func (m *Metrics) desc(name, help string, labels []string) *prometheus.Desc {
	key := name + "\x00" + strings.Join(labels, "\x00")
	m.descMu.Lock()
	defer m.descMu.Unlock()
	d, ok := m.descs[key]
	if !ok {
		d = prometheus.NewDesc(name, help, labels, prometheus.Labels{"pipeline": m.pipeline})
		m.descs[key] = d
	}
	return d
}

// observer is the stream.Observer feeding the processing and latency
// histograms.
type observer struct{ m *Metrics }

func (o observer) Stage(name string) stream.StageObserver {
	return stageObserver{o.m.processing.WithLabelValues(name)}
}

type stageObserver struct{ h prometheus.Observer }

func (s stageObserver) Processed(n int, d time.Duration) { s.h.Observe(d.Seconds() / float64(n)) }

func (o observer) Latency(d time.Duration) { o.m.latency.Observe(d.Seconds()) }

// LatencyInTrace keeps the trace id as the bucket's exemplar
// (stream.TraceObserver).
func (o observer) LatencyInTrace(d time.Duration, traceID string) {
	observeInTrace(o.m.latency, d.Seconds(), traceID)
}

// graph exports every stage's counters.
func (m *Metrics) graph(g *stream.Graph) {
	meter{m}.Collect(func(w stream.MetricWriter) {
		for _, s := range g.Stats() {
			l := stream.Label{Name: "stage", Value: s.Name}
			w.Counter("sluice_stage_received_total", "Messages a stage received from its input.", float64(s.In), l)
			w.Counter("sluice_stage_emitted_total", "Messages a stage handed to its output.", float64(s.Out), l)
			w.Counter("sluice_stage_failed_total", "Messages a stage sent to the failure stream.", float64(s.Failed), l)
			for o := stream.Filtered; o <= stream.DeadLettered; o++ {
				w.Counter("sluice_stage_settled_total", "Messages that left the pipeline in a stage, by outcome.",
					float64(s.SettledBy[o]), l, stream.Label{Name: "outcome", Value: o.String()})
			}
			w.Gauge("sluice_stage_in_flight", "Messages a stage holds: received, not yet emitted, settled or failed.", float64(s.InFlight()), l)
			w.Gauge("sluice_stage_buffered", "Messages waiting in the pipe in front of a stage.", float64(s.Buffered), l)
			w.Gauge("sluice_stage_buffer_capacity", "Capacity of the pipe in front of a stage, in messages.", float64(s.Capacity), l)
			w.Counter("sluice_stage_blocked_seconds_total", "Time a stage waited for room in a full downstream pipe (backpressure).", s.Blocked.Seconds(), l)
		}
	})
}

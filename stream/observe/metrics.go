// Package observe makes a running pipeline visible: Prometheus metrics
// (registered on a registry the caller gives, never only the global one),
// health and readiness endpoints, and a live /status page that draws the
// pipeline as a chain of stages with their rate, in-flight messages and
// buffer fill. Most numbers are read from the stages' own counters when
// Prometheus scrapes, so they cost nothing between scrapes; the engine
// reports durations for the histograms through a stream.Observer.
//
// docs/metrics.md lists every metric with its labels and example alerts.
package observe

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// Metrics collects a pipeline's metrics, labelled with its name.
type Metrics struct {
	pipeline string

	processing *prometheus.HistogramVec
	latency    prometheus.Histogram
	call       *prometheus.HistogramVec
	attempts   *prometheus.HistogramVec
	total      *prometheus.HistogramVec

	mu      sync.Mutex
	sources []func(ch chan<- prometheus.Metric)
}

// New creates the metrics of the pipeline named pipeline and registers
// them on reg.
func New(reg prometheus.Registerer, pipeline string) (*Metrics, error) {
	pl := prometheus.Labels{"pipeline": pipeline}
	m := &Metrics{
		pipeline: pipeline,
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
		call: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_async_call_seconds", ConstLabels: pl,
			Help:    "Latency of one call of an asynchronous stage (one attempt).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"stage"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_async_attempts", ConstLabels: pl,
			Help:    "Calls made per message by an asynchronous stage, retries included.",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20},
		}, []string{"stage"}),
		total: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_async_message_seconds", ConstLabels: pl,
			Help:    "Time from a message's first call to its outcome, waits between retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 22),
		}, []string{"stage"}),
	}
	for _, c := range []prometheus.Collector{m.processing, m.latency, m.call, m.attempts, m.total, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observer returns the stream.Observer to give the pipeline
// (stream.WithObserver) for the processing and latency histograms.
func (m *Metrics) Observer() stream.Observer { return observer{m} }

type observer struct{ m *Metrics }

func (o observer) Stage(name string) stream.StageObserver {
	return stageObserver{o.m.processing.WithLabelValues(name)}
}

type stageObserver struct{ h prometheus.Observer }

func (s stageObserver) Processed(n int, d time.Duration) { s.h.Observe(d.Seconds() / float64(n)) }

func (o observer) Latency(d time.Duration) { o.m.latency.Observe(d.Seconds()) }

// AsyncOptions returns the MapAsync options that feed the call, attempts
// and total-time histograms of the stage named stage. Add them to the
// stage's options.
func (m *Metrics) AsyncOptions(stage string) []flow.AsyncOption {
	call := m.call.WithLabelValues(stage)
	attempts := m.attempts.WithLabelValues(stage)
	total := m.total.WithLabelValues(stage)
	return []flow.AsyncOption{
		flow.OnCall(func(c flow.CallInfo) { call.Observe(c.Latency.Seconds()) }),
		flow.OnDone(func(d flow.DoneInfo) {
			attempts.Observe(float64(d.Attempts))
			total.Observe(d.Total.Seconds())
		}),
	}
}

// Describe sends nothing: the collector is unchecked, its metrics depend on
// what is registered with it.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads every registered source of numbers.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	srcs := make([]func(ch chan<- prometheus.Metric), len(m.sources))
	copy(srcs, m.sources)
	m.mu.Unlock()
	for _, s := range srcs {
		s(ch)
	}
}

func (m *Metrics) add(f func(ch chan<- prometheus.Metric)) {
	m.mu.Lock()
	m.sources = append(m.sources, f)
	m.mu.Unlock()
}

// desc builds a description with the pipeline label and the given variable
// labels.
func (m *Metrics) desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, prometheus.Labels{"pipeline": m.pipeline})
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
}

// Graph exports every stage's counters.
func (m *Metrics) Graph(g *stream.Graph) {
	received := m.desc("sluice_stage_received_total", "Messages a stage received from its input.", "stage")
	emitted := m.desc("sluice_stage_emitted_total", "Messages a stage handed to its output.", "stage")
	settled := m.desc("sluice_stage_settled_total", "Messages that left the pipeline in a stage, by outcome.", "stage", "outcome")
	failed := m.desc("sluice_stage_failed_total", "Messages a stage sent to the failure stream.", "stage")
	inFlight := m.desc("sluice_stage_in_flight", "Messages a stage holds: received, not yet emitted, settled or failed.", "stage")
	buffered := m.desc("sluice_stage_buffered", "Messages waiting in the pipe in front of a stage.", "stage")
	capacity := m.desc("sluice_stage_buffer_capacity", "Capacity of the pipe in front of a stage, in messages.", "stage")
	blocked := m.desc("sluice_stage_blocked_seconds_total", "Time a stage waited for room in a full downstream pipe (backpressure).", "stage")
	m.add(func(ch chan<- prometheus.Metric) {
		for _, s := range g.Stats() {
			counter(ch, received, float64(s.In), s.Name)
			counter(ch, emitted, float64(s.Out), s.Name)
			counter(ch, failed, float64(s.Failed), s.Name)
			for o := stream.Filtered; o <= stream.DeadLettered; o++ {
				counter(ch, settled, float64(s.SettledBy[o]), s.Name, o.String())
			}
			gauge(ch, inFlight, float64(s.InFlight()), s.Name)
			gauge(ch, buffered, float64(s.Buffered), s.Name)
			gauge(ch, capacity, float64(s.Capacity), s.Name)
			counter(ch, blocked, s.Blocked.Seconds(), s.Name)
		}
	})
}

// AsyncStatser is what an asynchronous stage (*flow.Async) offers.
type AsyncStatser interface{ Stats() flow.AsyncStats }

// Async exports an asynchronous stage's gauges and counters; stage is its
// name in the pipeline.
func (m *Metrics) Async(stage string, a AsyncStatser) {
	inFlight := m.desc("sluice_async_in_flight", "Calls an asynchronous stage is running.", "stage")
	waiting := m.desc("sluice_async_waiting", "Messages an asynchronous stage holds that are not being called: waiting for a slot, a key, their next attempt or their turn to be emitted.", "stage")
	delayed := m.desc("sluice_async_delayed", "Messages waiting for their next attempt.", "stage")
	limit := m.desc("sluice_async_limit", "Current cap on calls in flight (parallelism, or lower with an adaptive limiter).", "stage")
	calls := m.desc("sluice_async_calls_total", "Calls made, by result (ok, error, timeout).", "stage", "result")
	retries := m.desc("sluice_retries_total", "Retries scheduled, by reason (throttled, timeout, connection, breaker_open, other).", "stage", "reason")
	exhausted := m.desc("sluice_retries_exhausted_total", "Messages whose transient failure outlasted the retry policy (then parked).", "stage")
	noBudget := m.desc("sluice_retry_budget_refused_total", "Retries the retry budget refused.", "stage")
	refused := m.desc("sluice_async_refused_total", "Attempts the circuit breaker refused: no call was made.", "stage")
	m.add(func(ch chan<- prometheus.Metric) {
		st := a.Stats()
		gauge(ch, inFlight, float64(st.InFlight), stage)
		gauge(ch, waiting, float64(st.Waiting), stage)
		gauge(ch, delayed, float64(st.Delayed), stage)
		gauge(ch, limit, float64(st.Limit), stage)
		counter(ch, calls, float64(st.Calls-st.Failed), stage, "ok")
		counter(ch, calls, float64(st.Failed-st.Timeouts), stage, "error")
		counter(ch, calls, float64(st.Timeouts), stage, "timeout")
		for r, n := range st.Retries {
			counter(ch, retries, float64(n), stage, string(r))
		}
		counter(ch, exhausted, float64(st.Exhausted), stage)
		counter(ch, noBudget, float64(st.NoBudget), stage)
		counter(ch, refused, float64(st.Refused), stage)
	})
}

// Breaker exports a circuit breaker's state and transitions; dependency
// names what it protects.
func (m *Metrics) Breaker(dependency string, b *backpressure.Breaker) {
	state := m.desc("sluice_breaker_state", "1 for the breaker's current state (closed, half_open, open), 0 for the others.", "dependency", "state")
	trans := m.desc("sluice_breaker_transitions_total", "State changes of the breaker.", "dependency")
	m.add(func(ch chan<- prometheus.Metric) {
		cur := b.State()
		for _, s := range []struct {
			st   backpressure.BreakerState
			name string
		}{{backpressure.Closed, "closed"}, {backpressure.HalfOpen, "half_open"}, {backpressure.Open, "open"}} {
			v := 0.0
			if s.st == cur {
				v = 1
			}
			gauge(ch, state, v, dependency, s.name)
		}
		counter(ch, trans, float64(b.Transitions()), dependency)
	})
}

// Budget exports a retry budget's counters; dependency names what it
// protects.
func (m *Metrics) Budget(dependency string, b *backpressure.RetryBudget) {
	allowed := m.desc("sluice_retry_budget_allowed_total", "Retries the budget granted.", "dependency")
	exhausted := m.desc("sluice_retry_budget_exhausted_total", "Retries refused because the budget was spent.", "dependency")
	m.add(func(ch chan<- prometheus.Metric) {
		counter(ch, allowed, float64(b.Allowed()), dependency)
		counter(ch, exhausted, float64(b.Exhausted()), dependency)
	})
}

// KafkaSource exports a Kafka source's counters and, per assigned
// partition, its committed offset, unsettled records and lag.
func (m *Metrics) KafkaSource(src *kafka.Source) {
	records := m.desc("sluice_kafka_records_total", "Records the Kafka source emitted.")
	commits := m.desc("sluice_kafka_commits_total", "Offset commits that succeeded.")
	commitErrs := m.desc("sluice_kafka_commit_errors_total", "Offset commits that failed.")
	lastCommit := m.desc("sluice_kafka_commit_seconds", "Latency of the latest offset commit.")
	pauses := m.desc("sluice_kafka_pauses_total", "Times a partition was paused for holding too many unsettled records.")
	paused := m.desc("sluice_kafka_paused_partitions", "Partitions paused now.")
	late := m.desc("sluice_kafka_late_settles_total", "Settles that arrived after their partition was revoked (ignored: the new owner redoes them).")
	rebalances := m.desc("sluice_kafka_rebalances_total", "Rebalance events, by kind (assigned, revoked, lost).", "kind")
	committed := m.desc("sluice_kafka_committed_offset", "Last offset this member committed for a partition.", "topic", "partition")
	unsettled := m.desc("sluice_kafka_unsettled", "Records of a partition delivered and not yet settled.", "topic", "partition")
	lag := m.desc("sluice_kafka_lag", "High watermark of the last fetch minus the committed offset.", "topic", "partition")
	commitAge := m.desc("sluice_kafka_commit_age_seconds", "Time since an offset commit last succeeded (or found nothing to commit).")
	contactAge := m.desc("sluice_kafka_broker_contact_age_seconds", "Time since a broker last answered a request of the source's client.")
	m.add(func(ch chan<- prometheus.Metric) {
		st := src.Stats()
		counter(ch, records, float64(st.Records))
		counter(ch, commits, float64(st.Commits))
		counter(ch, commitErrs, float64(st.CommitErrors))
		gauge(ch, lastCommit, st.LastCommit.Seconds())
		counter(ch, pauses, float64(st.Pauses))
		counter(ch, late, float64(st.LateSettles))
		counter(ch, rebalances, float64(st.Assigned), "assigned")
		counter(ch, rebalances, float64(st.Revoked), "revoked")
		counter(ch, rebalances, float64(st.Lost), "lost")
		gauge(ch, commitAge, st.SinceCommit.Seconds())
		gauge(ch, contactAge, st.SinceContact.Seconds())
		n := 0
		for _, p := range st.Partitions {
			part := itoa(p.Partition)
			if p.Paused {
				n++
			}
			if p.Committed >= 0 {
				gauge(ch, committed, float64(p.Committed), p.Topic, part)
				gauge(ch, lag, float64(p.Lag), p.Topic, part)
			}
			gauge(ch, unsettled, float64(p.Unsettled), p.Topic, part)
		}
		gauge(ch, paused, float64(n))
	})
}

// CheckpointStatser is what a checkpoint sink (*checkpoint.Sink) offers.
type CheckpointStatser interface{ Stats() checkpoint.Stats }

// Checkpoint exports a checkpoint sink's commit counters.
func (m *Metrics) Checkpoint(stage string, c CheckpointStatser) {
	commits := m.desc("sluice_checkpoint_commits_total", "Commits the checkpoint sink made, by result.", "stage", "result")
	mean := m.desc("sluice_checkpoint_commit_mean_seconds", "Mean latency of the checkpoint sink's commits.", "stage")
	m.add(func(ch chan<- prometheus.Metric) {
		st := c.Stats()
		counter(ch, commits, float64(st.Commits), stage, "ok")
		counter(ch, commits, float64(st.Failures), stage, "error")
		gauge(ch, mean, st.Mean.Seconds(), stage)
	})
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }

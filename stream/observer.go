package stream

import (
	"fmt"
	"time"
)

// WithObserver has the engine report durations to o (see Observer); the
// counters of Stats need no observer. Default: none, which costs nothing.
// Several observers (this option given more than once, AddObserver) are
// each told everything.
func WithObserver(o Observer) Option {
	return func(g *Graph) {
		if o != nil {
			g.observers = append(g.observers, o)
		}
	}
}

// AddObserver adds an observer to a pipeline that has not started, as
// WithObserver does: a metrics package registering a pipeline built
// elsewhere adds its own.
func (g *Graph) AddObserver(o Observer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Checked under the lock Run holds while it prepares: an observer is
	// either in the run or refused, never dropped.
	if g.started.Load() {
		return &ConfigError{Stage: "", Argument: "AddObserver", Reason: fmt.Sprintf("pipeline %q is already running", g.name)}
	}
	if o != nil {
		g.observers = append(g.observers, o)
	}
	return nil
}

// Observer receives the measurements that counters cannot carry:
// durations, for histograms. Its methods are called from stage goroutines
// and must be safe for concurrent use.
type Observer interface {
	// Stage returns the observer of one stage; Run calls it once per stage
	// before starting.
	Stage(name string) StageObserver
	// Latency reports, for a message settled in the pipeline, the time
	// since its Timestamp (the record's time for Kafka messages):
	// end-to-end latency.
	Latency(d time.Duration)
}

// TraceObserver is implemented by an Observer that keeps exemplars of the
// end-to-end latency: in a traced pipeline (WithTracerProvider), a message
// whose traceparent header says its trace was sampled is reported with
// LatencyInTrace, and its trace id (32 lower-case hex digits), instead of
// Latency, so that a histogram bucket can point at one trace that fell in
// it (observe.Metrics keeps it as the exemplar {trace_id="..."}).
type TraceObserver interface {
	LatencyInTrace(d time.Duration, traceID string)
}

// StageObserver receives one stage's measurements.
type StageObserver interface {
	// Processed reports that the stage took d over a batch of n messages,
	// from receiving it to asking for the next (time blocked downstream
	// included).
	Processed(n int, d time.Duration)
}

// teeObservers returns the observers as one: nil for none, the observer
// itself for one.
func teeObservers(os []Observer) Observer {
	switch len(os) {
	case 0:
		return nil
	case 1:
		return os[0]
	}
	return tee(os)
}

type tee []Observer

func (t tee) Stage(name string) StageObserver {
	var ss stageTee
	for _, o := range t {
		if s := o.Stage(name); s != nil {
			ss = append(ss, s)
		}
	}
	switch len(ss) {
	case 0:
		return nil
	case 1:
		return ss[0]
	}
	return ss
}

func (t tee) Latency(d time.Duration) {
	for _, o := range t {
		o.Latency(d)
	}
}

func (t tee) LatencyInTrace(d time.Duration, traceID string) {
	for _, o := range t {
		if to, ok := o.(TraceObserver); ok {
			to.LatencyInTrace(d, traceID)
		} else {
			o.Latency(d)
		}
	}
}

// observeLatency reports the end-to-end latency d of the message e: with
// its trace id if the pipeline traces, the observer keeps exemplars and
// e's trace was sampled.
func (g *Graph) observeLatency(obs Observer, e *Envelope, d time.Duration) {
	if g.traceObs != nil {
		if id := sampledTraceID(e); id != "" {
			g.traceObs.LatencyInTrace(d, id)
			return
		}
	}
	obs.Latency(d)
}

// sampledTraceID returns the trace id of e's traceparent header (version
// 00) if its sampled flag is set, "" otherwise.
func sampledTraceID(e *Envelope) string {
	v := e.Header("traceparent")
	if len(v) < 55 || v[0] != '0' || v[1] != '0' || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return ""
	}
	if f := v[54]; !(f == '1' || f == '3' || f == '5' || f == '7' || f == '9' || f == 'b' || f == 'd' || f == 'f') {
		return "" // the flags' low bit is sampled
	}
	zero := true
	for _, c := range v[3:35] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
		zero = zero && c == '0'
	}
	if zero {
		return ""
	}
	return string(v[3:35])
}

type stageTee []StageObserver

func (s stageTee) Processed(n int, d time.Duration) {
	for _, o := range s {
		o.Processed(n, d)
	}
}

package stream

// A component with numbers of its own — a source's records and commits, an
// asynchronous stage's calls, a circuit breaker's state, a sink's commits —
// publishes them by implementing Instrumented. A metrics package (for
// Prometheus, stream/observe) calls Instrument once per component when it
// registers the pipeline (Graph.Parts lists them), and the component
// reports through the Meter it is given. So the component knows its numbers
// and no metrics library, the metrics package knows no component, and a
// pipeline without Kafka never links the Kafka client through its metrics.

// Label is one label of a metric: a name from a fixed set (stage,
// dependency, topic, partition, result, ...), never a key or a message id,
// so that series stay bounded.
type Label struct{ Name, Value string }

// MetricWriter receives a component's current numbers when metrics are
// read. Name a metric sluice_<component>_<what>, in base units; a counter
// ends in _total. A metric name always comes with the same label names.
type MetricWriter interface {
	Counter(name, help string, value float64, labels ...Label)
	Gauge(name, help string, value float64, labels ...Label)
}

// Meter is what a component is given to publish its numbers.
type Meter interface {
	// Collect registers f, called each time metrics are read, to write
	// the component's current counters and gauges: numbers the component
	// keeps anyway cost nothing between reads.
	Collect(f func(w MetricWriter))
	// Histogram returns the function recording one observation of the
	// histogram name (upper bounds buckets) with the given labels. It is
	// safe for concurrent use.
	Histogram(name, help string, buckets []float64, labels ...Label) func(float64)
	// Include instruments a part of the component (an asynchronous
	// stage's circuit breaker) once, however many components include it:
	// the first to include it names the stage.
	Include(part Instrumented, stage string)
}

// ExemplarMeter is implemented by a Meter whose histograms keep exemplars
// (observe.Metrics' do): HistogramWithExemplars is Histogram whose
// function also takes the trace id of the observation, "" for none, so
// that a bucket can point at one trace that fell in it. A component that
// traces asks for it with a type assertion and falls back to Histogram.
type ExemplarMeter interface {
	HistogramWithExemplars(name, help string, buckets []float64, labels ...Label) func(v float64, traceID string)
}

// Instrumented is implemented by a stage, source, sink or dependency that
// publishes numbers of its own. Instrument is called once, before the
// pipeline runs; stage is the component's name in the pipeline.
type Instrumented interface {
	Instrument(stage string, m Meter)
}

// Part is a component of a pipeline: the source, flow or sink given to
// From, Via or To, with its unique stage name.
type Part struct {
	Stage string
	Value any
}

// Parts returns the pipeline's sources, flows and sinks in the order they
// were added (stages built with NewStage have none, unless they Publish
// one). A metrics package
// instruments those that are Instrumented.
func (g *Graph) Parts() []Part {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ps []Part
	for _, n := range g.nodes {
		if n.value != nil {
			ps = append(ps, Part{Stage: n.name, Value: n.value})
		}
	}
	return ps
}

package stream

import "time"

// WithObserver has the engine report durations to o (see Observer); the
// counters of Stats need no observer. Default: none, which costs nothing.
func WithObserver(o Observer) Option { return func(g *Graph) { g.observer = o } }

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

// StageObserver receives one stage's measurements.
type StageObserver interface {
	// Processed reports that the stage took d over a batch of n messages,
	// from receiving it to asking for the next (time blocked downstream
	// included).
	Processed(n int, d time.Duration)
}

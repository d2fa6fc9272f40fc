package backpressure

import (
	"time"
)

// Limiter bounds how many calls an asynchronous stage runs at once. The
// stage starts a call only while fewer than Limit() are in flight, and
// reports every finished call to Observe. Both are called from any
// goroutine, at once (flow.MapAsync's workers ask Limit before each call;
// it fails the message of a call whose Observe panicked).
type Limiter interface {
	// Limit returns the number of calls allowed in flight now.
	Limit() int
	// Observe reports a finished call.
	Observe(s Sample)
}

// Sample describes one finished call.
type Sample struct {
	// Latency is how long the call took: from its start, or, in a
	// flow.MapAsync stage with flow.TimeoutFromSend, from when it sent its
	// request (the service's latency, without the worker's own queueing).
	Latency time.Duration
	// InFlight is the number of calls in flight when it started, itself
	// included.
	InFlight int
	// Dropped reports that the call timed out or was rejected as
	// overloaded: a sign of congestion whatever its latency.
	Dropped bool
}

// Fixed is a Limiter with a constant limit.
type Fixed int

// Limit returns the fixed limit.
func (f Fixed) Limit() int { return int(f) }

// Observe does nothing: a fixed limit does not adapt.
func (f Fixed) Observe(Sample) {}

// Validate reports a limit below 1.
func (f Fixed) Validate() error {
	if f < 1 {
		return configError("fixed limit", "limit", "must be at least 1, got %d", int(f))
	}
	return nil
}

package redisstream

import "github.com/sluice-streams/sluice/stream"

// Stats is a snapshot of a sink's or a producer's counters.
type Stats struct {
	// Written counts the entries Redis acknowledged (an entry written
	// twice after a lost reply counts twice).
	Written int64
	// Refused counts the messages (records, for a Producer) failed for a
	// reason of their own: the Encoder's error, more bytes than MaxBytes.
	Refused int64
	// Retries counts the round trips made again after a lost connection.
	Retries int64
}

func (c *counters) stats() Stats {
	return Stats{Written: c.written.Load(), Refused: c.refused.Load(), Retries: c.retries.Load()}
}

// Stats returns the sink's counters; it can be read while the sink runs.
func (s *Sink[T]) Stats() Stats { return s.counters.stats() }

// writeBuckets are the bounds of sluice_redisstream_write_seconds: a
// batch on loopback takes under a millisecond, one through a lost
// connection up to RetryFor.
var writeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30}

// Instrument publishes the sink's counters and the time of its writes,
// labelled with its stage (see docs/metrics.md). Call it before Run.
func (s *Sink[T]) Instrument(stageName string, m stream.Meter) {
	s.counters.instrument(stageName, m)
}

func (c *counters) instrument(stageName string, m stream.Meter) {
	l := stream.Label{Name: "stage", Value: stageName}
	c.writeSeconds = m.Histogram("sluice_redisstream_write_seconds",
		"Time of one round trip of XADD commands, a batch of entries, retries after a lost connection included.", writeBuckets, l)
	m.Collect(func(w stream.MetricWriter) {
		st := c.stats()
		w.Counter("sluice_redisstream_written_total", "Entries Redis acknowledged.", float64(st.Written), l)
		w.Counter("sluice_redisstream_refused_total",
			"Messages failed for a reason of their own: the encoder's error, an entry over MaxBytes.", float64(st.Refused), l)
		w.Counter("sluice_redisstream_write_retries_total",
			"Round trips of XADD commands made again after a lost connection.", float64(st.Retries), l)
	})
}

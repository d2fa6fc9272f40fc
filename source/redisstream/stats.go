package redisstream

import (
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// StreamStats describes one stream the source reads.
type StreamStats struct {
	Stream string
	// InFlight counts this instance's entries read and not yet
	// acknowledged.
	InFlight int
	// Pending is the size of the group's pending list (every consumer's),
	// and Lag the entries not yet delivered to the group, as of the last
	// look (every ClaimEvery; Redis 7 or later reports the lag).
	Pending, Lag int64
	// Read counts entries delivered to the pipeline (of them Reclaimed
	// were taken over from a consumer idle longer than MinIdle, or left
	// pending by an earlier instance), Acked those acknowledged, Poison
	// those delivered more than MaxDeliveries times, DeadLettered those
	// written to the dead-letter stream (poison and malformed).
	Read, Acked, Reclaimed, Poison, DeadLettered int64
}

// Stats is a snapshot of the source.
type Stats struct {
	Streams []StreamStats
	// InFlight counts entries read and not yet acknowledged, of every
	// stream.
	InFlight int
	// Duplicates counts settles of a message already settled (ignored).
	Duplicates int64
	// Outage is how long Redis calls have failed with none succeeding (0
	// while they succeed).
	Outage time.Duration
}

// Stats returns a snapshot of the source's counters.
func (s *Source) Stats() Stats {
	st := Stats{Duplicates: s.dupes.Load()}
	st.Outage, _ = s.health.lostFor(time.Now())
	s.mu.Lock()
	inflight := make([]int, len(s.held))
	for i, h := range s.held {
		inflight[i] = len(h)
	}
	s.mu.Unlock()
	for i, name := range s.cfg.Streams {
		c := &s.streams[i]
		st.Streams = append(st.Streams, StreamStats{
			Stream: name, InFlight: inflight[i], Pending: c.pending.Load(), Lag: c.lag.Load(),
			Read: c.read.Load(), Acked: c.acked.Load(), Reclaimed: c.reclaimed.Load(),
			Poison: c.poison.Load(), DeadLettered: c.deadLettered.Load(),
		})
		st.InFlight += inflight[i]
	}
	return st
}

// Lag returns the entries of every stream not yet delivered to the group,
// as of the last look at the group (every ClaimEvery), or 0 for a stream
// since a read found it drained: source.Priority counts a level with lag
// as having work waiting.
func (s *Source) Lag() int64 {
	var n int64
	for i := range s.streams {
		n += s.streams[i].lag.Load()
	}
	return n
}

// readBuckets are the upper bounds of sluice_redisstream_read_seconds: a
// read returns at once when entries wait, and after Block when none do.
var readBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// Instrument publishes the source's numbers per stream (docs/metrics.md,
// "Redis Streams"), labelled stage and stream. A metrics package calls it
// when it registers the pipeline; the stage name also goes into the
// sluice-stage header of the dead letters.
func (s *Source) Instrument(stage string, m stream.Meter) {
	s.stage.Store(&stage)
	l := stream.Label{Name: "stage", Value: stage}
	obs := m.Histogram("sluice_redisstream_read_seconds",
		"Time of one read of new entries (XREADGROUP), including its wait for entries (at most Block).", readBuckets, l)
	s.readObs.Store(&obs)
	m.Collect(func(w stream.MetricWriter) {
		for _, st := range s.Stats().Streams {
			ls := []stream.Label{l, {Name: "stream", Value: st.Stream}}
			w.Gauge("sluice_redisstream_in_flight", "Entries this instance read and has not acknowledged yet.", float64(st.InFlight), ls...)
			w.Gauge("sluice_redisstream_pending", "Size of the group's pending list (every consumer's entries read and not acknowledged), as of the last look.", float64(st.Pending), ls...)
			w.Gauge("sluice_redisstream_lag", "Entries of the stream not yet delivered to the group, as of the last look.", float64(st.Lag), ls...)
			w.Counter("sluice_redisstream_read_total", "Entries delivered to the pipeline.", float64(st.Read), ls...)
			w.Counter("sluice_redisstream_acked_total", "Entries acknowledged (XACK) after their message was settled.", float64(st.Acked), ls...)
			w.Counter("sluice_redisstream_reclaimed_total", "Entries delivered after being taken over from an idle consumer or left pending by an earlier instance.", float64(st.Reclaimed), ls...)
			w.Counter("sluice_redisstream_poison_total", "Entries found delivered more than MaxDeliveries times.", float64(st.Poison), ls...)
			w.Counter("sluice_redisstream_dead_lettered_total", "Entries moved to the dead-letter stream (poison or without a value).", float64(st.DeadLettered), ls...)
		}
	})
}

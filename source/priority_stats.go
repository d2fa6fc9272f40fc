package source

import (
	"strconv"
	"sync/atomic"

	"github.com/sluice-streams/sluice/stream"
)

// LevelStats is one level of a priority source, as PriorityStats lists it.
type LevelStats struct {
	// Received counts the level's messages the stage took from its pipe,
	// Emitted those it handed on.
	Received, Emitted int64
	// Queued is the level's messages waiting in the stage: in its pipe
	// and taken but not yet handed on.
	Queued int64
	// Lag is what the level's source reports waiting at the broker (a
	// Lagger: a Kafka source's records not fetched yet), -1 if it does not
	// tell.
	Lag int64
	// Paused is true while the level is held back at the broker; Pauses
	// counts the times it was.
	Paused bool
	Pauses int64
}

// priorityStats is a priority source's numbers by level: written by the
// stage and its pauser, read by metrics from any goroutine.
type priorityStats struct {
	levels []levelCounter
	queued []func() int64 // messages in each level's pipe
	lag    []Lagger
}

type levelCounter struct {
	received, emitted atomic.Int64
	paused            atomic.Bool
	pauses            atomic.Int64
}

func (s *priorityStats) stats() []LevelStats {
	out := make([]LevelStats, len(s.levels))
	for l := range s.levels {
		c := &s.levels[l]
		rcv, emt := c.received.Load(), c.emitted.Load()
		out[l] = LevelStats{Received: rcv, Emitted: emt, Queued: max(0, rcv-emt), Lag: -1, Paused: c.paused.Load(), Pauses: c.pauses.Load()}
		if s.queued[l] != nil {
			out[l].Queued += s.queued[l]()
		}
		if s.lag[l] != nil {
			out[l].Lag = s.lag[l].Lag()
		}
	}
	return out
}

// Instrument publishes the numbers by level (docs/metrics.md, "Priority
// sources"), read when metrics are read.
func (s *priorityStats) Instrument(stage string, m stream.Meter) {
	sl := stream.Label{Name: "stage", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		for l, st := range s.stats() {
			pl := stream.Label{Name: "priority", Value: strconv.Itoa(l)}
			w.Counter("sluice_priority_received_total", "Messages of a level a priority source took from the level's source.", float64(st.Received), sl, pl)
			w.Counter("sluice_priority_emitted_total", "Messages of a level a priority source handed on.", float64(st.Emitted), sl, pl)
			w.Gauge("sluice_priority_queued", "Messages of a level waiting in a priority source, fetched and not yet handed on.", float64(st.Queued), sl, pl)
			if st.Lag >= 0 {
				w.Gauge("sluice_priority_lag", "Messages of a level waiting at the broker, not yet fetched (the level's source's lag).", float64(st.Lag), sl, pl)
			}
			w.Gauge("sluice_priority_paused", "1 while a level is held back at the broker for a higher one.", b2f(st.Paused), sl, pl)
			w.Counter("sluice_priority_pauses_total", "Times a level was held back at the broker for a higher one.", float64(st.Pauses), sl, pl)
		}
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

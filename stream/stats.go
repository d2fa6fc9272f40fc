package stream

import (
	"slices"
	"time"
)

// StageStats is a snapshot of one stage's counters. The counters are
// updated once per batch, so they lag the truth by at most a batch.
type StageStats struct {
	Name string
	// In counts messages the stage received; Out messages it emitted.
	In, Out int64
	// Settled counts messages that left the pipeline in this stage
	// (completed at a sink, filtered, dropped); Failed those it sent to the
	// failure stream.
	Settled, Failed int64
	// Buffered is the number of messages waiting in the stage's input pipes:
	// backpressure made visible. A full input means the stage is the
	// bottleneck.
	Buffered int64
	// Capacity is the capacity of the stage's input pipes, in messages.
	Capacity int64
	// SettledBy counts Settled by outcome (index: Outcome).
	SettledBy [DeadLettered + 1]int64
	// Blocked is the time the stage spent waiting for room downstream: a
	// stage that blocks a lot is held back by a slower one after it.
	Blocked time.Duration
	// FailurePath marks a stage that handles what other stages failed (it
	// reads the failure stream, directly or after other such stages).
	FailurePath bool
	// Inputs names the stages whose output the stage reads, in the order
	// they were connected: one for a chain, several where streams merge
	// (fan-in), none for a source. A stage reading the pipeline's failure
	// stream lists every stage whose failures reach it.
	Inputs []string
}

// InFlight returns the messages the stage holds: received but not yet
// emitted, settled or failed. For stages that emit several messages per
// input (FlatMap, Broadcast) or one per many (Batch) it is not meaningful.
func (s StageStats) InFlight() int64 {
	return max(0, s.In-s.Out-s.Settled-s.Failed)
}

// Stats returns a snapshot of every stage's counters, sources first, in the
// order the stages were added. It is safe to call while the pipeline runs.
func (g *Graph) Stats() []StageStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.build.Lock()
	defer g.build.Unlock()
	out := make([]StageStats, 0, len(g.nodes))
	for _, n := range g.nodes {
		s := StageStats{
			Name:    n.name,
			In:      n.stats.in.Load(),
			Out:     n.stats.out.Load(),
			Settled: n.stats.settled.Load(),
			Failed:  n.stats.failed.Load(),
			Blocked: time.Duration(n.stats.blocked.Load()),

			FailurePath: n.failurePath,
		}
		for o := range s.SettledBy {
			s.SettledBy[o] = n.stats.byOutcome[o].Load()
		}
		for _, in := range n.ins {
			s.Buffered += max(0, in.buffered())
			s.Capacity += in.capacity()
			for _, name := range in.inputs() {
				if !slices.Contains(s.Inputs, name) {
					s.Inputs = append(s.Inputs, name)
				}
			}
		}
		out = append(out, s)
	}
	return out
}

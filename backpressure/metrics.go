package backpressure

import "github.com/sluice-streams/sluice/stream"

// Instrument publishes the breaker's state and transitions (docs/metrics.md,
// "Dependencies"), labelled dependency with the breaker's Name, or with
// stage, the stage that uses it, when it has none. An asynchronous stage
// given the breaker (flow.Breaker) instruments it with itself.
func (b *Breaker) Instrument(stage string, m stream.Meter) {
	dep := stream.Label{Name: "dependency", Value: b.cfg.Name}
	if dep.Value == "" {
		dep.Value = stage
	}
	m.Collect(func(w stream.MetricWriter) {
		st := b.Stats()
		cur := st.State
		for _, s := range []BreakerState{Closed, HalfOpen, Open} {
			v := 0.0
			if s == cur {
				v = 1
			}
			w.Gauge("sluice_breaker_state", "1 for the breaker's current state (closed, half_open, open), 0 for the others.",
				v, dep, stream.Label{Name: "state", Value: stateLabel(s)})
		}
		w.Counter("sluice_breaker_transitions_total", "State changes of the breaker.", float64(st.Transitions), dep)
	})
}

// stateLabel is a state's label value.
func stateLabel(s BreakerState) string {
	switch s {
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "closed"
}

// Instrument publishes the budget's counters (docs/metrics.md,
// "Dependencies"), labelled dependency with stage, the stage that uses it
// (the first, when stages share it). An asynchronous stage given the budget
// (flow.Budget) instruments it with itself.
func (b *RetryBudget) Instrument(stage string, m stream.Meter) {
	dep := stream.Label{Name: "dependency", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		st := b.Stats()
		w.Counter("sluice_retry_budget_allowed_total", "Retries the budget granted.", float64(st.Allowed), dep)
		w.Counter("sluice_retry_budget_exhausted_total", "Retries refused because the budget was spent.", float64(st.Exhausted), dep)
	})
}

package observe

import (
	"cmp"
	"slices"

	"github.com/sluice-streams/sluice/stream"
)

// LevelStatus is one level of priority of one stage, as /status.json lists
// it: the stage's counters and gauges that carry a priority label (a
// priority source's received and buffered messages, its paused
// partitions; a stage with Lanes' waiting, running and completed
// messages, its desired workers), by metric name without the sluice_
// prefix.
type LevelStatus struct {
	Stage    string             `json:"stage"`
	Priority string             `json:"priority"`
	Values   map[string]float64 `json:"values"`
}

// Levels reads the registered components' numbers that carry a priority
// label, by stage and level (ordered).
func (m *Metrics) Levels() []LevelStatus {
	m.mu.Lock()
	fs := slices.Clone(m.collect)
	m.mu.Unlock()
	w := &levelWriter{at: map[[2]string]int{}}
	for _, f := range fs {
		f(w)
	}
	slices.SortStableFunc(w.out, func(a, b LevelStatus) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(len(a.Priority), len(b.Priority)), cmp.Compare(a.Priority, b.Priority))
	})
	return w.out
}

// levelWriter keeps the series labelled with a stage and a priority.
type levelWriter struct {
	out []LevelStatus
	at  map[[2]string]int
}

func (w *levelWriter) Counter(name, _ string, v float64, labels ...stream.Label) {
	w.write(name, v, labels)
}
func (w *levelWriter) Gauge(name, _ string, v float64, labels ...stream.Label) {
	w.write(name, v, labels)
}

func (w *levelWriter) write(name string, v float64, labels []stream.Label) {
	var stage, prio string
	for _, l := range labels {
		switch l.Name {
		case "stage":
			stage = l.Value
		case "priority":
			prio = l.Value
		default:
			return // another dimension (a partition, a result): not a level's own number
		}
	}
	if prio == "" {
		return
	}
	k := [2]string{stage, prio}
	i, ok := w.at[k]
	if !ok {
		i = len(w.out)
		w.at[k] = i
		w.out = append(w.out, LevelStatus{Stage: stage, Priority: prio, Values: map[string]float64{}})
	}
	w.out[i].Values[trimPrefix(name)] = v
}

func trimPrefix(name string) string {
	const p = "sluice_"
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):]
	}
	return name
}

package observe

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-streams/sluice/stream"
)

// LevelStatus is one level of priority of one stage, as /status.json lists
// it: the stage's counters and gauges that carry a priority label (a
// priority source's received and buffered messages, its paused
// partitions; a stage with Lanes' waiting, running and completed
// messages, its desired workers), by metric name without the sluice_
// prefix.
type LevelStatus struct {
	Stage    string `json:"stage"`
	Priority string `json:"priority"`
	// Name is the level's name (Metrics.NameLevels, else the priority
	// source's level sources), or Priority if it has none.
	Name   string             `json:"name"`
	Values map[string]float64 `json:"values"`
}

// NameLevels names the levels of priority of the pipeline, the highest
// (0) first, for /status and /history.json: "high", "normal", "low", say.
// Without names, the levels of a pipeline read by a priority source take
// the names of its level sources (their common prefix cut: "requests-high"
// is "high"); otherwise they are shown as numbers.
func (m *Metrics) NameLevels(names ...string) {
	m.mu.Lock()
	m.levelNames = slices.Clone(names)
	m.mu.Unlock()
}

// levelNamer returns the function naming a level given by its number.
func (m *Metrics) levelNamer(stats []stream.StageStats, levels []levelValue) func(string) string {
	m.mu.Lock()
	names := m.levelNames
	m.mu.Unlock()
	if names == nil {
		names = sourceLevelNames(stats, levels)
	}
	return func(prio string) string {
		if i, err := strconv.Atoi(prio); err == nil && i >= 0 && i < len(names) && names[i] != "" {
			return names[i]
		}
		return prio
	}
}

// sourceLevelNames names the levels after the sources of the priority
// source (the stage publishing sluice_priority_ numbers), if it has one
// input per level.
func sourceLevelNames(stats []stream.StageStats, levels []levelValue) []string {
	prios := map[string]map[string]bool{}
	for _, l := range levels {
		if strings.HasPrefix(l.name, "sluice_priority_") {
			if prios[l.stage] == nil {
				prios[l.stage] = map[string]bool{}
			}
			prios[l.stage][l.prio] = true
		}
	}
	for _, s := range stats {
		if n := len(prios[s.Name]); n > 1 && n == len(s.Inputs) {
			return trimCommonPrefix(s.Inputs)
		}
	}
	return nil
}

// trimCommonPrefix cuts the prefix all names share, up to a separator
// ("requests-high", "requests-low": "high", "low").
func trimCommonPrefix(names []string) []string {
	p := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	cut := strings.LastIndexAny(p, "-_./ ") + 1
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if cut > 0 && len(n) > cut {
			out[i] = n[cut:]
		}
	}
	return out
}

// naturalCompare orders names with numbers by value ("in/2" before
// "in/10").
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			x, _ := strconv.Atoi(a[:da])
			y, _ := strconv.Atoi(b[:db])
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) int {
	i := 0
	for i < len(s) && i < 9 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
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
	var stats []stream.StageStats
	m.mu.Lock()
	g := m.g
	m.mu.Unlock()
	if g != nil {
		stats = g.Stats()
	}
	name := m.levelNamer(stats, w.raw)
	for i := range w.out {
		w.out[i].Name = name(w.out[i].Priority)
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
	raw []levelValue
}

func (w *levelWriter) Counter(name, _ string, v float64, labels ...stream.Label) {
	w.write(name, v, labels)
}
func (w *levelWriter) Gauge(name, _ string, v float64, labels ...stream.Label) {
	w.write(name, v, labels)
}

// levelLabels returns the stage and level of a number of one level of
// priority of one stage; ok is false for any other number (another
// dimension, a partition or a result, or no level).
func levelLabels(labels []stream.Label) (stage, prio string, ok bool) {
	for _, l := range labels {
		switch l.Name {
		case "stage":
			stage = l.Value
		case "priority":
			prio = l.Value
		default:
			return "", "", false
		}
	}
	return stage, prio, prio != ""
}

func (w *levelWriter) write(name string, v float64, labels []stream.Label) {
	stage, prio, ok := levelLabels(labels)
	if !ok {
		return
	}
	w.raw = append(w.raw, levelValue{stage: stage, prio: prio, name: name, v: v})
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

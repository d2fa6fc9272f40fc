package demo

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// String is the verdict, a few lines of at most maxWidth columns (a
// list of reasons may run longer): whether every request was accounted
// for (PASS or FAIL, as OK), its outcomes, the latency against its
// target and that of the requests never throttled and throttled, the drain, and whether the machine was too busy for the
// figures to mean much.
func (s Summary) String() string {
	if !s.Checked() {
		// A run that ended before any request was acknowledged (its
		// error says why), or whose requests all went unacknowledged
		// and never reached the workers, passed nothing.
		l := "no verification: no request was acknowledged, so none was checked"
		if s.Unconfirmed > 0 {
			l += fmt.Sprintf(" (%d sent without an acknowledgement, none of them reached the workers)", s.Unconfirmed)
		}
		return l
	}
	verdict := "PASS"
	if !s.OK() {
		verdict = "FAIL"
	}
	head := fmt.Sprintf("verification %s: %d requests acknowledged (%d duplicates)", verdict, s.Sent, s.Duplicates)
	if s.Elapsed > 0 {
		head += fmt.Sprintf(", verified %v after the load began", s.Elapsed.Round(100*time.Millisecond))
	}
	lines := []string{head,
		fmt.Sprintf("  completed %d of %d deliverable (%.2f%%); compensated %d%s",
			s.Completed, s.Deliverable, 100*s.CompletedShare(), s.Compensated, counts(s.CompensatedBy)),
		fmt.Sprintf("  dead-lettered %d%s, expected %d", sum(s.DeadLettered), counts(s.DeadLettered), s.ExpectedDead),
	}
	lines = append(lines, s.violations()...)
	if s.Unconfirmed > 0 {
		lines = append(lines, fmt.Sprintf("  unconfirmed %d (never acknowledged, not expected), %d of them reached the workers",
			s.Unconfirmed, s.UnconfirmedArrived))
	}
	if l := s.latencyLine(); l != "" {
		lines = append(lines, l)
	}
	if l := s.throttlingLine(); l != "" {
		lines = append(lines, l)
	}
	switch {
	case s.DrainStalled:
		lines = append(lines, fmt.Sprintf("  drain: given up %v after the load ended, %v without a new outcome; "+
			"%d without one then, counted lost (the scheduler held %d parked, %d in its stages)",
			s.Drained.Round(100*time.Millisecond), s.DrainLimit, s.Lost, s.HeldParked, s.HeldInStages))
	case s.Drained > 0:
		lines = append(lines, fmt.Sprintf("  drain: every request accounted for %v after the load ended (highest lag %d)",
			s.Drained.Round(100*time.Millisecond), s.MaxLag))
	}
	if l := s.machineLine(); l != "" {
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// violations are the lines of the promises the verdict checks, all 0 for
// a PASS: one line, and one more for the rarer ones when they happened.
func (s Summary) violations() []string {
	lines := []string{fmt.Sprintf("  lost %d, applied twice %d, left after compensation %d, valid dead-lettered %d, "+
		"two outcomes %d, compensated needlessly %d", s.Lost, s.Twice, s.LeftoverAfterUndo, s.ValidDeadLettered,
		s.TwoOutcomes, s.Needless)}
	var more []string
	if s.Incomplete > 0 {
		more = append(more, fmt.Sprintf("completed without their package or drone %d", s.Incomplete))
	}
	if s.CompensationsDeadLettered > 0 {
		more = append(more, fmt.Sprintf("compensations dead-lettered %d", s.CompensationsDeadLettered))
	}
	if len(s.ValidDeadReasons) > 0 {
		more = append(more, "valid dead-lettered e.g. "+strings.Join(s.ValidDeadReasons, "; "))
	}
	if len(more) > 0 {
		lines = append(lines, "  also "+strings.Join(more, ", "))
	}
	return lines
}

// latencyLine judges the end-to-end p99 against the target; empty when
// the run measured none.
func (s Summary) latencyLine() string {
	if s.P99 <= 0 {
		return ""
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	l := fmt.Sprintf("  latency: p50 %v p99 %v", ms(s.P50), ms(s.P99))
	if s.Levels != ([delivery.Levels]LevelSummary{}) {
		l += fmt.Sprintf(" (p99 high %v, normal %v, low %v)", ms(s.Levels[0].P99), ms(s.Levels[1].P99), ms(s.Levels[2].P99))
	}
	if s.LatencyTarget <= 0 {
		return l
	}
	p99, of := s.P99, ""
	if s.TargetHigh {
		p99, of = s.Levels[delivery.High].P99, " high"
	}
	met := "MET"
	if p99 > s.LatencyTarget {
		met = "MISSED"
	}
	return l + fmt.Sprintf("; target%s p99 < %v: %s", of, s.LatencyTarget, met)
}

// throttlingLine shows the p99 of the completed requests that no service
// throttled apart from those one did (Summary.NeverThrottled): the
// first is the worker's own latency, the second waited what the services
// asked. Empty when the run measured neither.
func (s Summary) throttlingLine() string {
	if s.NeverThrottled.N == 0 && s.Throttled.N == 0 {
		return ""
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("  latency to completion: p99 never throttled %v (n=%d, p50 %v), throttled %v (n=%d, p50 %v)",
		ms(s.NeverThrottled.P99), s.NeverThrottled.N, ms(s.NeverThrottled.P50),
		ms(s.Throttled.P99), s.Throttled.N, ms(s.Throttled.P50))
}

// machineLine says, when the process waited for a CPU long enough to
// slow every figure, that the machine was too busy for them to mean
// much; otherwise how long it waited.
func (s Summary) machineLine() string {
	if s.CPURun <= 0 {
		return ""
	}
	share := float64(s.CPUWait) / float64(s.CPURun)
	l := fmt.Sprintf("the process waited %v for a CPU and ran %v (%.0f%%)",
		s.CPUWait.Round(100*time.Millisecond), s.CPURun.Round(100*time.Millisecond), 100*share)
	if share < starvedShare {
		return "  machine: " + l
	}
	return "  machine too busy: " + l + ", latencies inflated"
}

// counts renders a count per name as " (a 1, b 2)", names sorted; empty
// for none.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

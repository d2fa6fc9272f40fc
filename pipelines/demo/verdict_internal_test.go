package demo

import (
	"strings"
	"testing"
	"time"
)

// The widest figures a run realistically shows (two minutes, bursts of
// 100,000/s, latencies of tens of seconds, a lag of millions, every
// breaker open) still fit in 120 columns; before, the status line was up
// to 295 wide.
func TestStatusLinesFitTheWidth(t *testing.T) {
	f := figures{elapsed: 1234*time.Second + 500*time.Millisecond, ingest: 999_999, done: 999_999,
		p50: 99*time.Second + 999*time.Millisecond, p99: 99*time.Second + 999*time.Millisecond,
		lag: 99_999_999, inFlight: 99_999, limitLo: 10_000, limitHi: 10_000, retries: 99_999_999,
		breakers: []string{"check_account half-open", "create_package open", "check_third_party open",
			"schedule_drone half-open", "create_delivery open"}, dead: 9_999_999, undone: 9_999_999}
	lines := formatStatus(f)
	ls := formatLevels([]levelFigures{
		{name: "high", sent: 999_999, read: 999_999, done: 999_999, lag: 99_999_999, wait: 99 * time.Second, e2e: 99 * time.Second},
		{name: "normal", sent: 999_999, read: 999_999, done: 999_999, lag: 99_999_999, wait: 99 * time.Second, e2e: 99 * time.Second},
		{name: "low", sent: 999_999, read: 999_999, done: 999_999, lag: 99_999_999, wait: 99 * time.Second, e2e: 99 * time.Second}})
	for _, l := range append(lines, ls...) {
		if len(l) > maxWidth {
			t.Errorf("%d columns: %q", len(l), l)
		}
	}
	if !strings.HasSuffix(lines[1], "breakers 5 not closed") {
		t.Errorf("five breakers open do not fit by name and are not counted: %q", lines[1])
	}
	if got := formatStatus(figures{breakers: []string{"schedule_drone open"}})[1]; !strings.HasSuffix(got, "breakers schedule_drone open") {
		t.Errorf("one breaker open is not named: %q", got)
	}
	if len(ls) != 3 || !strings.Contains(ls[1], "normal sent 999999/s read 999999/s done 999999/s lag 99999999") {
		t.Errorf("lines by level:\n%s", strings.Join(ls, "\n"))
	}
}

// passing is the summary of a run that kept every promise, with the
// largest figures a run of a few minutes shows.
func passing() Summary {
	return Summary{Sent: 2_345_678, Duplicates: 23_456, Deliverable: 2_300_000, Completed: 2_300_000, Compensated: 12_345,
		CompensatedBy: map[string]int{"suspended": 4_567, "undeliverable": 7_778}, DeadLettered: map[string]int{"invalid": 7_000, "malformed": 4_700},
		ExpectedDead: 11_700, P50: 109 * time.Millisecond, P99: 1430 * time.Millisecond, Elapsed: 52*time.Second + 340*time.Millisecond,
		MaxLag: 1_234_567, Drained: 17*time.Second + 250*time.Millisecond,
		Levels:        [3]LevelSummary{{P99: 629 * time.Millisecond}, {P99: 711 * time.Millisecond}, {P99: 21516 * time.Millisecond}},
		LatencyTarget: DefaultLatencyTarget, CPURun: 95 * time.Second, CPUWait: 3 * time.Second,
		NeverThrottled: Latencies{N: 2_287_654, P50: 95 * time.Millisecond, P99: 1180 * time.Millisecond},
		Throttled:      Latencies{N: 12_346, P50: 2105 * time.Millisecond, P99: 12345 * time.Millisecond}}
}

// The verdict is a few short lines, no Go map syntax, with the latency
// judged against the target; before, it was one line of 573 columns
// printing maps, and said PASS at p99 28.9 s without a word on latency.
func TestVerdictIsShortAndJudgesLatency(t *testing.T) {
	s := passing()
	out := s.String()
	lines := strings.Split(out, "\n")
	if len(lines) > 8 {
		t.Errorf("%d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if len(l) > maxWidth {
			t.Errorf("%d columns: %q", len(l), l)
		}
	}
	for _, want := range []string{"verification PASS: 2345678 requests acknowledged", "compensated 12345 (suspended 4567, undeliverable 7778)",
		"dead-lettered 11700 (invalid 7000, malformed 4700), expected 11700", "lost 0, applied twice 0",
		"p50 109ms p99 1.43s", "target p99 < 2s: MET", "drain: every request accounted for 17.3s after the load ended",
		"machine: the process waited 3s for a CPU and ran 1m35s (3%)",
		"latency to completion: p99 never throttled 1.18s (n=2287654, p50 95ms), throttled 12.345s (n=12346, p50 2.105s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the verdict does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "map[") {
		t.Errorf("Go map syntax:\n%s", out)
	}

	s.P99 = 28900 * time.Millisecond
	s.CPUWait = 60 * time.Second
	out = s.String()
	for _, want := range []string{"verification PASS", "target p99 < 2s: MISSED", "machine too busy: the process waited 1m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("a slow run on a busy machine: the verdict does not say %q:\n%s", want, out)
		}
	}
	s.Lost, s.DrainStalled, s.DrainLimit, s.HeldParked, s.HeldInStages = 336, true, 30*time.Second, 330, 6
	if out := s.String(); !strings.HasPrefix(out, "verification FAIL") ||
		!strings.Contains(out, "drain: given up 17.3s after the load ended, 30s without a new outcome; 336 without one then, counted lost "+
			"(the scheduler held 330 parked, 6 in its stages)") {
		t.Errorf("a drain that gave up does not say so:\n%s", out)
	}
	s.Lost, s.DrainStalled = 0, false
	s.TargetHigh = true // the high level, 629 ms, is judged alone
	if out := s.String(); !strings.Contains(out, "target high p99 < 2s: MET") {
		t.Errorf("the target of an overload, on the high level:\n%s", out)
	}
}

// A run verified from another process has no latency of the worker's
// own (P99 0), and still shows the latency the verification measured,
// never-throttled requests apart; a run that measured neither shows no
// latency at all.
func TestVerdictShowsTheLatencyByThrottling(t *testing.T) {
	s := passing()
	s.P50, s.P99, s.Levels = 0, 0, [3]LevelSummary{}
	out := s.String()
	if strings.Contains(out, "latency: p50") || !strings.Contains(out,
		"  latency to completion: p99 never throttled 1.18s (n=2287654, p50 95ms), throttled 12.345s (n=12346, p50 2.105s)") {
		t.Errorf("the verdict of a run verified from another process:\n%s", out)
	}
	s.NeverThrottled, s.Throttled = Latencies{}, Latencies{}
	if out := s.String(); strings.Contains(out, "latency") {
		t.Errorf("a run that measured no latency shows one:\n%s", out)
	}
}

// The verdict's PASS is as strict as OK: one request lost, doubled,
// needlessly compensated or otherwise wrong fails it.
func TestVerdictFailsOnAnyViolation(t *testing.T) {
	for name, spoil := range map[string]func(*Summary){
		"lost": func(s *Summary) { s.Lost = 1 }, "twice": func(s *Summary) { s.Twice = 1 },
		"left after undo": func(s *Summary) { s.LeftoverAfterUndo = 1 }, "needless": func(s *Summary) { s.Needless = 1 },
		"valid dead": func(s *Summary) { s.ValidDeadLettered = 1 }, "two outcomes": func(s *Summary) { s.TwoOutcomes = 1 },
		"incomplete": func(s *Summary) { s.Incomplete = 1 },
	} {
		s := passing()
		spoil(&s)
		if s.OK() || !strings.HasPrefix(s.String(), "verification FAIL") {
			t.Errorf("%s: %s", name, s.String())
		}
	}
}

// A run that ended before any request was acknowledged (the live view's
// address taken, say) is not a PASS: it checked nothing. Before, it
// printed "verification PASS: sent 0 (0 duplicates) ...".
func TestVerdictOfNothingIsNoPass(t *testing.T) {
	if got := (Summary{}).String(); strings.Contains(got, "PASS") || !strings.HasPrefix(got, "no verification") {
		t.Fatalf("the verdict of a run that checked nothing: %q", got)
	}
}

// A run whose every request went unacknowledged, and none of which reached
// the workers (a broker that took none), judged nothing either: it is no
// PASS, and not OK (sluice demo exits 0 on OK).
func TestVerdictOfOnlyUnconfirmedRequestsIsNoPass(t *testing.T) {
	s := Summary{Unconfirmed: 500, DeadLettered: map[string]int{}, CompensatedBy: map[string]int{}}
	if got := s.String(); strings.Contains(got, "PASS") || !strings.HasPrefix(got, "no verification") || s.OK() {
		t.Fatalf("the verdict of 500 requests unacknowledged, none arrived (OK %v): %q", s.OK(), got)
	}
}

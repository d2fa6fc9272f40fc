package demo

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/internal/quantile"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/stream"
)

// status renders the live lines: every tick the overall figures on two
// lines, and every levelEvery ticks one line per level of priority.
type status struct {
	w        *workers
	ledger   *delivery.Ledger
	notes    *supervisor.Notifications
	sent     *loadgen.Sent
	lat      *latencies
	levels   *delivery.LevelStats
	start    time.Time
	lastSent int64
	lastDone int
	lastAt   time.Time
	ticks    int
	// The last counts by level, and when they were taken: sent, read by
	// the scheduler (of the current incarnation), completed.
	lastLevelSent, lastRead, lastLevelDone [delivery.Levels]int64
	lastLevelAt                            time.Time
	lastInc                                *incarnation
}

// levelEvery is how many status ticks apart the lines by level come: the
// overall lines are the ones to follow second by second.
const levelEvery = 5

// maxWidth is the widest a status or verdict line may be.
const maxWidth = 120

// figures are the overall numbers of one status tick.
type figures struct {
	elapsed          time.Duration
	ingest, done     float64 // per second since the last tick
	p50, p99         time.Duration
	lag, inFlight    int64
	limitLo, limitHi int64
	retries          int64
	breakers         []string // "step state" of every breaker not closed
	dead, undone     int
}

// levelFigures are one level's numbers since the last lines by level.
type levelFigures struct {
	name             string
	sent, read, done float64 // per second
	lag              int64
	wait, e2e        time.Duration // p99
}

func (s *status) line() string {
	now := time.Now()
	if s.lastAt.IsZero() {
		s.lastAt, s.lastLevelAt = s.start, s.start
	}
	cur := s.w.current()
	levelLag := cur.lag()
	f := s.overall(now, cur, levelLag)
	lines := formatStatus(f)
	s.ticks++
	if s.ticks%levelEvery == 0 {
		lines = append(lines, formatLevels(s.byLevel(now, cur, levelLag))...)
	}
	return strings.Join(lines, "\n")
}

// overall gathers the figures of the tick at now.
func (s *status) overall(now time.Time, cur *incarnation, levelLag [delivery.Levels]int64) figures {
	dt := now.Sub(s.lastAt).Seconds()
	sent := s.sent.Total()
	done := s.ledger.LiveCount("deliveries")
	f := figures{elapsed: now.Sub(s.start), ingest: float64(sent-s.lastSent) / dt, done: float64(done-s.lastDone) / dt,
		p50: s.lat.recent(0.5), p99: s.lat.recent(0.99), lag: levelLag[0] + levelLag[1] + levelLag[2],
		limitLo: -1, dead: s.w.deadLettered(), undone: s.notes.Len()}
	for _, a := range cur.sch.Steps {
		st := a.Stats()
		f.inFlight += st.InFlight
		for _, n := range st.Retries {
			f.retries += n
		}
		if f.limitLo < 0 || st.Limit < f.limitLo {
			f.limitLo = st.Limit
		}
		f.limitHi = max(f.limitHi, st.Limit)
	}
	for _, step := range delivery.Steps {
		if b := cur.sch.Breakers[step]; b != nil && b.State() != backpressure.Closed {
			f.breakers = append(f.breakers, fmt.Sprintf("%s %s", step, b.State()))
		}
	}
	s.lastSent, s.lastDone, s.lastAt = sent, done, now
	return f
}

// formatStatus renders f on two lines of at most maxWidth columns.
func formatStatus(f figures) []string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	first := fmt.Sprintf("%5.1fs in %6.0f/s done %6.0f/s | e2e p50 %v p99 %v | lag %d in-flight %d limit %d..%d",
		f.elapsed.Seconds(), f.ingest, f.done, ms(f.p50), ms(f.p99), f.lag, f.inFlight, f.limitLo, f.limitHi)
	second := fmt.Sprintf("       retries %d | dead-letters %d compensations %d | breakers ", f.retries, f.dead, f.undone)
	switch br := strings.Join(f.breakers, ", "); {
	case br == "":
		second += "closed"
	case len(second)+len(br) <= maxWidth:
		second += br
	default:
		second += fmt.Sprintf("%d not closed", len(f.breakers))
	}
	return []string{first, second}
}

// byLevel gathers, for each level of priority, the rates sent (by the
// load generator), read (by the scheduler) and completed since the last
// lines by level, the lag of its topic, and the p99 wait to be read and
// end-to-end latency of its latest completions.
func (s *status) byLevel(now time.Time, cur *incarnation, lag [delivery.Levels]int64) []levelFigures {
	dt := now.Sub(s.lastLevelAt).Seconds()
	sent, read, done := s.sent.Levels(), cur.received(), s.levels.Completed()
	if cur != s.lastInc { // a new incarnation's sources count from 0
		s.lastRead, s.lastInc = [delivery.Levels]int64{}, cur
	}
	out := make([]levelFigures, delivery.Levels)
	for l := range delivery.Levels {
		out[l] = levelFigures{name: delivery.LevelNames[l], sent: float64(sent[l]-s.lastLevelSent[l]) / dt,
			read: float64(read[l]-s.lastRead[l]) / dt, done: float64(done[l]-s.lastLevelDone[l]) / dt, lag: lag[l],
			wait: s.levels.RecentWait(l, 0.99), e2e: s.levels.Recent(l, 0.99)}
	}
	s.lastLevelSent, s.lastRead, s.lastLevelDone, s.lastLevelAt = sent, read, done, now
	return out
}

// formatLevels renders one line per level, at most maxWidth columns each.
func formatLevels(ls []levelFigures) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("       %-6s sent %6.0f/s read %6.0f/s done %6.0f/s lag %7d wait p99 %v e2e p99 %v",
			l.name, l.sent, l.read, l.done, l.lag, l.wait.Round(time.Millisecond), l.e2e.Round(time.Millisecond)))
	}
	return out
}

// latencies keeps every end-to-end latency of the run: the last 20,000
// for the status line's quantiles, all of them for the summary's.
type latencies struct {
	mu   sync.Mutex
	ring []time.Duration
	pos  int
	full bool
	all  []time.Duration
}

func newLatencies() *latencies {
	return &latencies{ring: make([]time.Duration, 20000)}
}

// Stage measures nothing per stage.
func (l *latencies) Stage(string) stream.StageObserver { return nil }

func (l *latencies) Latency(d time.Duration) {
	l.mu.Lock()
	l.ring[l.pos] = d
	l.pos++
	if l.pos == len(l.ring) {
		l.pos, l.full = 0, true
	}
	l.all = append(l.all, d)
	l.mu.Unlock()
}

// recent returns the q-quantile of the last 20,000 latencies.
func (l *latencies) recent(q float64) time.Duration {
	l.mu.Lock()
	n := l.pos
	if l.full {
		n = len(l.ring)
	}
	s := slices.Clone(l.ring[:n])
	l.mu.Unlock()
	return quantile.Of(s, q)
}

// overall returns the q-quantiles of every latency of the run.
func (l *latencies) overall(qs ...float64) []time.Duration {
	l.mu.Lock()
	s := slices.Clone(l.all)
	l.mu.Unlock()
	return quantile.All(s, qs...)
}

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

// status renders the live line.
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
	// The last counts by level: sent, read by the scheduler (of the
	// current incarnation), completed.
	lastLevelSent, lastRead, lastLevelDone [delivery.Levels]int64
	lastInc                                *incarnation
}

func (s *status) line() string {
	now := time.Now()
	if s.lastAt.IsZero() {
		s.lastAt = s.start
	}
	dt := now.Sub(s.lastAt).Seconds()
	sent := s.sent.Total()
	done := s.ledger.LiveCount("deliveries")
	cur := s.w.current()
	levelLag := cur.lag()
	lag := levelLag[0] + levelLag[1] + levelLag[2]
	var inflight, retries int64
	lo, hi := int64(-1), int64(0)
	for _, a := range cur.sch.Steps {
		st := a.Stats()
		inflight += st.InFlight
		for _, n := range st.Retries {
			retries += n
		}
		if lo < 0 || st.Limit < lo {
			lo = st.Limit
		}
		hi = max(hi, st.Limit)
	}
	breakers := "closed"
	var notClosed []string
	for _, step := range delivery.Steps {
		if b := cur.sch.Breakers[step]; b != nil && b.State() != backpressure.Closed {
			notClosed = append(notClosed, fmt.Sprintf("%s %s", step, b.State()))
		}
	}
	if len(notClosed) > 0 {
		breakers = strings.Join(notClosed, ", ")
	}
	dead := s.w.deadLettered()
	line := fmt.Sprintf("%5.1fs ingest %6.0f/s completed %6.0f/s | e2e p50 %v p99 %v | lag %d in-flight %d limit %d..%d | retries %d breakers %s | dead-letters %d compensations %d",
		now.Sub(s.start).Seconds(), float64(sent-s.lastSent)/dt, float64(done-s.lastDone)/dt,
		s.lat.recent(0.5).Round(time.Millisecond), s.lat.recent(0.99).Round(time.Millisecond),
		lag, inflight, lo, hi, retries, breakers, dead, s.notes.Len())
	line += "\n" + s.byLevel(cur, dt, levelLag)
	s.lastSent, s.lastDone, s.lastAt = sent, done, now
	return line
}

// byLevel is the status line's second line: for each level of priority,
// the rates sent (by the load generator), read (by the scheduler) and
// completed, the lag of its topic, and the p99 end-to-end latency of its
// latest completions.
func (s *status) byLevel(cur *incarnation, dt float64, lag [delivery.Levels]int64) string {
	sent, read, done := s.sent.Levels(), cur.received(), s.levels.Completed()
	if cur != s.lastInc { // a new incarnation's sources count from 0
		s.lastRead, s.lastInc = [delivery.Levels]int64{}, cur
	}
	var b strings.Builder
	b.WriteString("       by level")
	for l := range delivery.Levels {
		sep := " |"
		if l == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s: sent %6.0f/s read %6.0f/s done %6.0f/s lag %7d wait p99 %v e2e p99 %v", sep, delivery.LevelNames[l],
			float64(sent[l]-s.lastLevelSent[l])/dt, float64(read[l]-s.lastRead[l])/dt, float64(done[l]-s.lastLevelDone[l])/dt,
			lag[l], s.levels.RecentWait(l, 0.99).Round(time.Millisecond), s.levels.Recent(l, 0.99).Round(time.Millisecond))
	}
	s.lastLevelSent, s.lastRead, s.lastLevelDone = sent, read, done
	return b.String()
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

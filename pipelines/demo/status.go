package demo

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
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
	start    time.Time
	lastSent int64
	lastDone int
	lastAt   time.Time
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
	var lag int64
	for _, p := range cur.src.Stats().Partitions {
		lag += p.Lag
	}
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
	s.lastSent, s.lastDone, s.lastAt = sent, done, now
	return line
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
	return quantile(s, q)
}

// overall returns the q-quantiles of every latency of the run.
func (l *latencies) overall(qs ...float64) []time.Duration {
	l.mu.Lock()
	s := slices.Clone(l.all)
	l.mu.Unlock()
	slices.Sort(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = quantile(s, q)
	}
	return out
}

// quantile sorts s (if it is not sorted) and returns its q-quantile.
func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	if !slices.IsSorted(s) {
		slices.Sort(s)
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

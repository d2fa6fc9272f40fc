package delivery

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/internal/quantile"
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// LevelStats counts, by level of priority, the requests that completed the
// workflow and keeps their end-to-end latencies: from the request record's
// timestamp (its produce) to the end of the last step. The scheduler
// records them (SchedulerConfig.LevelStats) where a request leaves the
// workflow, from its Envelope.Priority: the level its steps served it at.
// It is safe for concurrent use.
type LevelStats struct {
	mu        sync.Mutex
	completed [Levels]int64
	recent    [Levels]ring
	waits     [Levels]ring            // record timestamp to parse, by the level read at
	all       [Levels][]time.Duration // nil unless keepAll
	keepAll   bool
}

// recentLatencies is how many of each level's latest latencies Recent
// reads: a few seconds of a busy level, and the last minutes of a quiet
// one.
const recentLatencies = 8192

type ring struct {
	d    []time.Duration
	pos  int
	full bool
}

func (r *ring) add(d time.Duration) {
	if r.d == nil {
		r.d = make([]time.Duration, recentLatencies)
	}
	r.d[r.pos] = d
	if r.pos++; r.pos == len(r.d) {
		r.pos, r.full = 0, true
	}
}

func (r *ring) values() []time.Duration {
	if r.full {
		return slices.Clone(r.d)
	}
	return slices.Clone(r.d[:r.pos])
}

// NewLevelStats returns empty statistics; keepAll keeps every latency, for
// quantiles over a whole run (Quantiles), at 8 bytes a request.
func NewLevelStats(keepAll bool) *LevelStats { return &LevelStats{keepAll: keepAll} }

// Completed returns how many requests of each level completed.
func (s *LevelStats) Completed() [Levels]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.completed
}

// Recent returns the q-quantile of the latest latencies of level (the last
// 8,192), 0 if none.
func (s *LevelStats) Recent(level int, q float64) time.Duration {
	s.mu.Lock()
	v := s.recent[level].values()
	s.mu.Unlock()
	return quantile.Of(v, q)
}

// RecentWait returns the q-quantile of how long the latest requests read
// at level waited to be read (from their record's timestamp to parse: the
// time in the producer, the broker and the priority source), 0 if none.
func (s *LevelStats) RecentWait(level int, q float64) time.Duration {
	s.mu.Lock()
	v := s.waits[level].values()
	s.mu.Unlock()
	return quantile.Of(v, q)
}

// read records the waits of a batch of records read.
func (s *LevelStats) read(items []stream.Message[[]byte], now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		if l := int(items[i].Priority); l < Levels && items[i].Timestamp.UnixNano() > 0 {
			s.waits[l].add(now.Sub(items[i].Timestamp))
		}
	}
}

// Quantiles returns the q-quantiles of every latency of level, if the
// statistics keep them all (zeros otherwise).
func (s *LevelStats) Quantiles(level int, qs ...float64) []time.Duration {
	s.mu.Lock()
	v := slices.Clone(s.all[level])
	s.mu.Unlock()
	return quantile.All(v, qs...)
}

// record counts a batch of completed requests, under one lock.
func (s *LevelStats) record(items []stream.Message[*Progress], now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range items {
		l := int(items[i].Priority)
		if l >= Levels {
			continue // the lanes refuse such a level before the last step
		}
		s.completed[l]++
		ts := items[i].Timestamp
		if ts.UnixNano() <= 0 {
			continue // no timestamp: no latency
		}
		d := now.Sub(ts)
		s.recent[l].add(d)
		if s.keepAll {
			s.all[l] = append(s.all[l], d)
		}
	}
}

// countLevels is the stage that records each batch that completed the
// workflow in s and hands it on as it is.
func countLevels(s *LevelStats) stream.Flow[*Progress, *Progress] {
	return stream.FlowFunc[*Progress, *Progress](func(ctx context.Context, in *stream.Inlet[*Progress], out *stream.Outlet[*Progress]) error {
		return stage.Loop(ctx, in, func(b *stream.Batch[*Progress]) (bool, error) {
			s.record(b.Items, time.Now())
			return true, out.SendBatch(ctx, b)
		})
	})
}

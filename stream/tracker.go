package stream

import (
	"math/bits"
	"sync"
)

// Tracker is an in-memory settle tracker for one ordered sequence of
// messages (one partition, one test source). It issues consecutive ids,
// accepts settles in any order and reports the watermark: the lowest id not
// yet settled, so that every id below it is done and a source may commit up
// to it. Settling is O(1) amortized. It is safe for concurrent use.
//
// A settle of an id that was never issued or that is already settled is not
// applied; it is counted in Stats().Duplicates, which tests of the
// settle-exactly-once contract read.
type Tracker struct {
	mu       sync.Mutex
	next     int64    // next id to issue
	wordBase int64    // id of bit 0 of done[0]; a multiple of 64 from start
	done     []uint64 // settled bits for ids >= wordBase
	mark     int64    // watermark
	stats    TrackerStats
}

// TrackerStats counts what a Tracker has seen.
type TrackerStats struct {
	Issued     int64
	Settled    [DeadLettered + 1]int64 // by Outcome
	Duplicates int64
}

// Total returns the number of messages settled, whatever the outcome.
func (s TrackerStats) Total() int64 {
	var n int64
	for _, c := range s.Settled {
		n += c
	}
	return n
}

// NewTracker returns a tracker whose first id is start.
func NewTracker(start int64) *Tracker {
	return &Tracker{next: start, wordBase: start, mark: start}
}

// Track issues the next id and returns a handle that settles it.
func (t *Tracker) Track() Handle {
	t.mu.Lock()
	id := t.next
	t.next++
	t.stats.Issued++
	t.mu.Unlock()
	return Handle{s: t, id: id}
}

// Settle marks id as settled with outcome o.
func (t *Tracker) Settle(id int64, o Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settle(id, o)
}

// SettleBatch settles many ids under one lock.
func (t *Tracker) SettleBatch(ids []int64, o Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.settle(id, o)
	}
}

func (t *Tracker) settle(id int64, o Outcome) {
	if id < t.mark || id >= t.next || o == 0 || o > DeadLettered {
		t.stats.Duplicates++
		return
	}
	idx := id - t.wordBase
	w, b := int(idx/64), uint(idx%64)
	for len(t.done) <= w {
		t.done = append(t.done, 0)
	}
	if t.done[w]&(1<<b) != 0 {
		t.stats.Duplicates++
		return
	}
	t.done[w] |= 1 << b
	t.stats.Settled[o]++
	t.advance()
}

func (t *Tracker) advance() {
	full := 0
	for full < len(t.done) && t.done[full] == ^uint64(0) {
		full++
	}
	if full > 0 {
		n := copy(t.done, t.done[full:])
		clear(t.done[n:])
		t.done = t.done[:n]
		t.wordBase += int64(64 * full)
	}
	t.mark = t.wordBase
	if len(t.done) > 0 {
		t.mark += int64(bits.TrailingZeros64(^t.done[0]))
	}
}

// Watermark returns the lowest id not yet settled: every id below it is
// settled.
func (t *Tracker) Watermark() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mark
}

// Pending returns how many issued ids are not yet settled.
func (t *Tracker) Pending() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats.Issued - t.stats.Total()
}

// Stats returns a snapshot of the tracker's counters.
func (t *Tracker) Stats() TrackerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

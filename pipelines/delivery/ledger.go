package delivery

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Ledger counts side effects per service and delivery id, so that tests and
// the demo can check that nothing was created twice. It is sharded by id:
// every simulated call of every step writes to it, and one lock would make
// the simulation, not the pipeline, the bottleneck of a benchmark.
type Ledger struct {
	shards [ledgerShards]ledgerShard
	live   [len(ledgerServices)]atomic.Int64 // records live now, by service
	undone [len(ledgerServices)]atomic.Int64 // records ever undone, by service
	// lastUndo is when the last undo was applied (Unix nanoseconds, 0:
	// none): how long after an outage compensations still ran.
	lastUndo atomic.Int64
}

const ledgerShards = 64

type ledgerShard struct {
	mu sync.Mutex
	m  map[string]*ledgerRecords // by delivery id
}

// ledgerRecords are one delivery's records, one per service that creates
// something, and how many of the calls made for it any service answered
// "slow down" (429): a throttled request waits at least the Retry-After it
// was given, whatever its worker does, and a verification tells its
// latency apart from the others'.
type ledgerRecords struct {
	svc       [len(ledgerServices)]ledgerEntry
	throttled int32
}

var ledgerServices = [...]string{"packages", "drones", "deliveries"}

// ledgerEntry is one record's history. An undone record is a tombstone:
// it is never created again.
type ledgerEntry struct {
	created, deleted int32
	live             bool
	createdAt        int64 // deliveries: when it was first created (Unix nanoseconds, whole milliseconds; 0: never)
	undoneAt         int64 // when it was first undone (Unix nanoseconds; 0: never)
}

// The services that create something, as indexes of ledgerServices.
const (
	svcPackages = iota
	svcDrones
	svcDeliveries
)

// serviceIndex finds a service by name; the ledger knows nothing of any
// other.
func serviceIndex(service string) (int, bool) {
	for i, s := range ledgerServices {
		if s == service {
			return i, true
		}
	}
	return 0, false
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	l := &Ledger{}
	for i := range l.shards {
		l.shards[i].m = map[string]*ledgerRecords{}
	}
	return l
}

// shard returns the shard of id (FNV-1a over the id).
func (l *Ledger) shard(id string) *ledgerShard {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return &l.shards[h%ledgerShards]
}

// update applies fn to the entry of service i's record of id under its
// shard's lock and keeps the per-service counts.
func (l *Ledger) update(i int, id string, fn func(e *ledgerEntry) error) error {
	s := l.shard(id)
	s.mu.Lock()
	rs := s.m[id]
	if rs == nil {
		rs = &ledgerRecords{}
		s.m[id] = rs
	}
	e := &rs.svc[i]
	was, wasUndone := e.live, e.deleted > 0
	err := fn(e)
	now := e.live
	if !wasUndone && e.deleted > 0 {
		l.undone[i].Add(1)
	}
	s.mu.Unlock()
	switch {
	case now && !was:
		l.live[i].Add(1)
	case was && !now:
		l.live[i].Add(-1)
	}
	return err
}

// get returns a copy of the entry of service/id.
func (l *Ledger) get(service, id string) ledgerEntry {
	i, ok := serviceIndex(service)
	if !ok {
		return ledgerEntry{}
	}
	s := l.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs := s.m[id]; rs != nil {
		return rs.svc[i]
	}
	return ledgerEntry{}
}

// put records a create-or-update: only the first creates. A record that a
// compensation undid stays undone: a late call (a retry whose earlier
// attempt timed out, a duplicate of the compensated request) is refused
// with ErrCancelled instead of bringing it back.
func (l *Ledger) put(i int, id string) error {
	return l.update(i, id, func(e *ledgerEntry) error {
		if e.deleted > 0 {
			return fmt.Errorf("%s %s: %w", ledgerServices[i], id, ErrCancelled)
		}
		if !e.live {
			e.live = true
			e.create(i)
		}
		return nil
	})
}

// add records a creation that is not idempotent: every call creates.
func (l *Ledger) add(i int, id string) error {
	return l.update(i, id, func(e *ledgerEntry) error {
		if e.deleted > 0 {
			return fmt.Errorf("%s %s: %w", ledgerServices[i], id, ErrCancelled)
		}
		e.live = true
		e.create(i)
		return nil
	})
}

// create counts a creation of service i's record and, for the
// deliveries service, notes when the first one was: when the request
// completed its last step. Only that one is kept, and to the millisecond
// (a latency's start, a record's timestamp, is no finer): each time in a
// downloaded ledger is about 3 bytes a delivery id more, gzipped.
func (e *ledgerEntry) create(i int) {
	if e.created == 0 && i == svcDeliveries {
		e.createdAt = time.Now().Truncate(time.Millisecond).UnixNano()
	}
	e.created++
}

// throttle records that a service answered a call made for id "slow
// down" (429). It keeps a count, in the id's records: as bounded as they
// are.
func (l *Ledger) throttle(id string) {
	s := l.shard(id)
	s.mu.Lock()
	rs := s.m[id]
	if rs == nil {
		rs = &ledgerRecords{}
		s.m[id] = rs
	}
	rs.throttled++
	s.mu.Unlock()
}

// Throttled returns how many calls made for id any service answered
// "slow down" (429, with a Retry-After).
func (l *Ledger) Throttled(id string) int {
	s := l.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs := s.m[id]; rs != nil {
		return int(rs.throttled)
	}
	return 0
}

// CreatedAt returns when service first created its record for id, to
// the millisecond; the zero time if it never did. Only the deliveries
// service's is kept: when the request completed.
func (l *Ledger) CreatedAt(service, id string) time.Time {
	return unixTime(l.get(service, id).createdAt)
}

// unixTime converts Unix nanoseconds to a time, 0 to the zero time.
func unixTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// del records a delete (undo). Deleting what is not there is not an
// error (undo is idempotent); either way the id is cancelled for good.
func (l *Ledger) del(i int, id string) {
	now := time.Now().UnixNano()
	_ = l.update(i, id, func(e *ledgerEntry) error {
		e.live = false
		e.deleted++
		if e.undoneAt == 0 {
			e.undoneAt = now
		}
		return nil
	})
	for last := l.lastUndo.Load(); now > last && !l.lastUndo.CompareAndSwap(last, now); last = l.lastUndo.Load() {
	}
}

// LastUndo returns when the last undo (a delete) was applied, whatever
// it deleted; the zero time if none was.
func (l *Ledger) LastUndo() time.Time {
	if n := l.lastUndo.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Live reports whether service holds a record for id now.
func (l *Ledger) Live(service, id string) bool { return l.get(service, id).live }

// Undone reports whether service's record for id was ever undone (deleted
// by a compensation).
func (l *Ledger) Undone(service, id string) bool { return l.get(service, id).deleted > 0 }

// UndoneCount returns how many of service's records were ever undone.
func (l *Ledger) UndoneCount(service string) int {
	if i, ok := serviceIndex(service); ok {
		return int(l.undone[i].Load())
	}
	return 0
}

// Created returns how many times service created a record for id.
func (l *Ledger) Created(service, id string) int { return int(l.get(service, id).created) }

// Twice returns how many records any service created more than once.
func (l *Ledger) Twice() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, rs := range s.m {
			for _, e := range rs.svc {
				if e.created > 1 {
					n++
				}
			}
		}
		s.mu.Unlock()
	}
	return n
}

// LiveCount returns how many records service holds now.
func (l *Ledger) LiveCount(service string) int {
	if i, ok := serviceIndex(service); ok {
		return int(l.live[i].Load())
	}
	return 0
}

package delivery

import (
	"fmt"
	"iter"
	"time"
)

// LedgerEntry is what one service did for one delivery id.
type LedgerEntry struct {
	// Created is how many times the service created the record: more than
	// one is a side effect applied twice.
	Created int `json:"created"`
	// Live reports whether the service holds the record now.
	Live bool `json:"live"`
	// Undone reports whether a compensation deleted the record; an undone
	// record is never created again. UndoneAt is when it was first
	// deleted (nil if never, or not known: a ledger of an earlier version).
	Undone   bool       `json:"undone"`
	UndoneAt *time.Time `json:"undone_at,omitempty"`
	// CreatedAt is, for the deliveries service, when the record was
	// first created, to the millisecond: when the request completed its
	// last step (nil if never, or not known: a ledger of an earlier
	// version). The other services leave it nil.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// LedgerRecord is what every service that creates something did for one
// delivery id; a service that did nothing has a zero entry.
type LedgerRecord struct {
	ID         string      `json:"id"`
	Packages   LedgerEntry `json:"packages"`
	Drones     LedgerEntry `json:"drones"`
	Deliveries LedgerEntry `json:"deliveries"`
	// Throttled counts the calls made for the delivery that a service
	// answered "slow down" (429, with a Retry-After), 0 if none was (or
	// not known: a ledger of an earlier version). A request that was
	// throttled waited at least the Retry-After it was given.
	Throttled int `json:"throttled,omitempty"`
}

// entry returns the entry of service i (an index of ledgerServices).
func (r *LedgerRecord) entry(i int) *LedgerEntry {
	switch i {
	case svcPackages:
		return &r.Packages
	case svcDrones:
		return &r.Drones
	default:
		return &r.Deliveries
	}
}

// recordOf converts a ledger's records of id to their exported form.
func recordOf(id string, rs *ledgerRecords) LedgerRecord {
	r := LedgerRecord{ID: id, Throttled: int(rs.throttled)}
	for i, e := range rs.svc {
		*r.entry(i) = LedgerEntry{Created: int(e.created), Live: e.live, Undone: e.deleted > 0,
			UndoneAt: timeOf(e.undoneAt), CreatedAt: timeOf(e.createdAt)}
	}
	return r
}

// timeOf converts Unix nanoseconds to a UTC time, nil for 0.
func timeOf(n int64) *time.Time {
	if n == 0 {
		return nil
	}
	t := time.Unix(0, n).UTC()
	return &t
}

// unixOf is timeOf's inverse.
func unixOf(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixNano()
}

// recordsOf is recordOf's inverse; it keeps what the ledger's questions
// need (an undone record counts one deletion).
func recordsOf(r *LedgerRecord) ledgerRecords {
	rs := ledgerRecords{throttled: int32(r.Throttled)}
	for i := range rs.svc {
		e := r.entry(i)
		rs.svc[i] = ledgerEntry{created: int32(e.Created), live: e.Live, undoneAt: unixOf(e.UndoneAt), createdAt: unixOf(e.CreatedAt)}
		if e.Undone {
			rs.svc[i].deleted = 1
		}
	}
	return rs
}

// LedgerTotals sums a ledger per service.
type LedgerTotals struct {
	// IDs is how many delivery ids any service has a record of, or
	// throttled a call for.
	IDs int `json:"ids"`
	// Services holds the totals of packages, drones and deliveries.
	Services map[string]ServiceTotals `json:"services"`
	// LastUndo is when the services last applied an undo (a delete, by
	// any service), nil if they never did: how long compensations went
	// on, after an outage for example. Only the services' own ledger
	// knows it; a snapshot's totals leave it nil.
	LastUndo *time.Time `json:"last_undo,omitempty"`
}

// ServiceTotals are one service's side effects over every delivery id.
type ServiceTotals struct {
	// Created counts creations: a record created twice counts twice.
	Created int `json:"created"`
	// Live counts the records held now, Undone those a compensation
	// deleted, CreatedTwice those created more than once.
	Live         int `json:"live"`
	Undone       int `json:"undone"`
	CreatedTwice int `json:"created_twice"`
}

// LiveCount returns how many records service holds.
func (t LedgerTotals) LiveCount(service string) int { return t.Services[service].Live }

// UndoneCount returns how many of service's records were undone.
func (t LedgerTotals) UndoneCount(service string) int { return t.Services[service].Undone }

// Twice returns how many records any service created more than once.
func (t LedgerTotals) Twice() int {
	n := 0
	for _, s := range t.Services {
		n += s.CreatedTwice
	}
	return n
}

// tally accumulates totals per service.
type tally struct {
	ids int
	svc [len(ledgerServices)]ServiceTotals
}

func (t *tally) add(rs *ledgerRecords) {
	t.ids++
	for i, e := range rs.svc {
		s := &t.svc[i]
		s.Created += int(e.created)
		if e.live {
			s.Live++
		}
		if e.deleted > 0 {
			s.Undone++
		}
		if e.created > 1 {
			s.CreatedTwice++
		}
	}
}

func (t *tally) totals() LedgerTotals {
	out := LedgerTotals{IDs: t.ids, Services: make(map[string]ServiceTotals, len(ledgerServices))}
	for i, name := range ledgerServices {
		out.Services[name] = t.svc[i]
	}
	return out
}

// Record returns what every service did for id.
func (l *Ledger) Record(id string) LedgerRecord {
	s := l.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs := s.m[id]; rs != nil {
		return recordOf(id, rs)
	}
	return LedgerRecord{ID: id}
}

// Totals sums the ledger per service. It visits every record, one shard
// at a time, each under its lock for the time it takes to count it.
func (l *Ledger) Totals() LedgerTotals {
	var t tally
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, rs := range s.m {
			t.add(rs)
		}
		s.mu.Unlock()
	}
	out := t.totals()
	if last := l.LastUndo(); !last.IsZero() {
		out.LastUndo = &last
	}
	return out
}

// All yields a copy of every delivery id's record, in no particular
// order. A shard is locked only while its records are copied, never while
// the caller works on them, so that reading the whole ledger of a running
// system holds its services up no longer than a count does. Records
// changed during the walk may be seen before or after the change.
func (l *Ledger) All() iter.Seq[LedgerRecord] {
	type idRecords struct {
		id string
		rs ledgerRecords
	}
	return func(yield func(LedgerRecord) bool) {
		var buf []idRecords
		for i := range l.shards {
			s := &l.shards[i]
			s.mu.Lock()
			for id, rs := range s.m {
				buf = append(buf, idRecords{id, *rs})
			}
			s.mu.Unlock()
			for j := range buf {
				if !yield(recordOf(buf[j].id, &buf[j].rs)) {
					return
				}
			}
			buf = buf[:0]
		}
	}
}

// Snapshot copies the ledger (see All).
func (l *Ledger) Snapshot() *LedgerSnapshot {
	s := NewLedgerSnapshot()
	for r := range l.All() {
		_ = s.Add(r) // the ledger holds each id once
	}
	return s
}

// LedgerSnapshot is a copy of a ledger that answers the same questions: a
// Ledger's own (Snapshot), or one downloaded from the services that hold
// it (FetchLedger), so that a run can be verified from another process.
// It is not safe for concurrent Adds.
type LedgerSnapshot struct {
	recs map[string]ledgerRecords
	t    tally
}

// NewLedgerSnapshot returns an empty snapshot.
func NewLedgerSnapshot() *LedgerSnapshot {
	return &LedgerSnapshot{recs: map[string]ledgerRecords{}}
}

// Add puts r in the snapshot; an id added twice is an error.
func (s *LedgerSnapshot) Add(r LedgerRecord) error {
	if _, dup := s.recs[r.ID]; dup {
		return fmt.Errorf("ledger snapshot: delivery id %q twice", r.ID)
	}
	rs := recordsOf(&r)
	s.recs[r.ID] = rs
	s.t.add(&rs)
	return nil
}

func (s *LedgerSnapshot) get(service, id string) ledgerEntry {
	i, ok := serviceIndex(service)
	if !ok {
		return ledgerEntry{}
	}
	rs := s.recs[id]
	return rs.svc[i]
}

// Len returns how many delivery ids the snapshot holds.
func (s *LedgerSnapshot) Len() int { return len(s.recs) }

// Record returns what every service did for id.
func (s *LedgerSnapshot) Record(id string) LedgerRecord {
	rs := s.recs[id]
	return recordOf(id, &rs)
}

// Live reports whether service held a record for id.
func (s *LedgerSnapshot) Live(service, id string) bool { return s.get(service, id).live }

// Undone reports whether service's record for id was undone.
func (s *LedgerSnapshot) Undone(service, id string) bool { return s.get(service, id).deleted > 0 }

// Created returns how many times service created a record for id.
func (s *LedgerSnapshot) Created(service, id string) int { return int(s.get(service, id).created) }

// Throttled returns how many calls made for id a service answered
// "slow down" (429).
func (s *LedgerSnapshot) Throttled(id string) int { return int(s.recs[id].throttled) }

// CreatedAt returns when service first created its record for id; the
// zero time if it never did, or the ledger did not say (only the
// deliveries service's is kept).
func (s *LedgerSnapshot) CreatedAt(service, id string) time.Time {
	return unixTime(s.get(service, id).createdAt)
}

// Totals sums the snapshot per service.
func (s *LedgerSnapshot) Totals() LedgerTotals { return s.t.totals() }

// LiveCount returns how many records service held.
func (s *LedgerSnapshot) LiveCount(service string) int {
	if i, ok := serviceIndex(service); ok {
		return s.t.svc[i].Live
	}
	return 0
}

// UndoneCount returns how many of service's records were undone.
func (s *LedgerSnapshot) UndoneCount(service string) int {
	if i, ok := serviceIndex(service); ok {
		return s.t.svc[i].Undone
	}
	return 0
}

// Twice returns how many records any service created more than once.
func (s *LedgerSnapshot) Twice() int {
	n := 0
	for _, st := range s.t.svc {
		n += st.CreatedTwice
	}
	return n
}

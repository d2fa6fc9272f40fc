package ownsim

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// MemStore is an ownership.Store and ownership.Tracker in memory with the semantics of
// redisstore's scripts (versions, epochs raised to the greater of
// epoch + 1 and the time in microseconds, leases and presence expiring by
// the store's clock), on the clock it is given: the simulated one, or
// time.Now (the fake clock inside a synctest bubble).
type MemStore struct {
	mu      sync.Mutex
	now     func() time.Time
	exp     time.Duration
	recs    []*memRec // by partition
	cks     map[int32]ownership.Checkpoint
	members map[string]time.Time
	ids     []string // members' ids, sorted; nil when it must be made again
	down    bool
	// stamp changes with every change a plan reads (ownership.Tracker);
	// lapses holds a deadline per claim and renewal, to notice a lease
	// lapsing (by time, without a write), as redisstore's sorted set.
	stamp  int64
	lapses lapseHeap
}

// lapse is when a lease renewed (or claimed) at mod lapses if not renewed.
type lapse struct {
	at, mod time.Time
	p       int32
}

type lapseHeap []lapse

func (h lapseHeap) Len() int           { return len(h) }
func (h lapseHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h lapseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lapseHeap) Push(x any)        { *h = append(*h, x.(lapse)) }
func (h *lapseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// renewed notes a lease written at now. Called with mu held.
func (s *MemStore) renewed(p int32, now time.Time) {
	heap.Push(&s.lapses, lapse{at: now.Add(s.exp), mod: now, p: p})
}

// lapsed reports whether a lease lapsed (by time) since the last look.
// Called with mu held.
func (s *MemStore) lapsed(now time.Time) bool {
	any := false
	for len(s.lapses) > 0 && now.After(s.lapses[0].at) {
		l := heap.Pop(&s.lapses).(lapse)
		if r := s.rec(l.p); r.owner != "" && r.modified.Equal(l.mod) {
			any = true
		}
	}
	return any
}

type memRec struct {
	owner    string
	epoch    int64
	version  int64
	modified time.Time
	// The owner whose live lease a claim took, until it acknowledges or
	// that lease would have expired.
	prev      string
	prevEpoch int64
	prevMod   time.Time
	// heldEpoch is the epoch of the lease the owner holds when a rewind
	// raised the record's (0: none), until the next claim.
	heldEpoch int64
}

// ErrDown is the error of every call while the store is down.
var ErrDown = errors.New("ownsim: store down")

// NewMemStore returns an empty store whose leases last exp, on the clock
// now.
func NewMemStore(exp time.Duration, now func() time.Time) *MemStore {
	return &MemStore{now: now, exp: exp, cks: map[int32]ownership.Checkpoint{}, members: map[string]time.Time{}}
}

// Expiration returns how long a lease lasts without a renewal.
func (s *MemStore) Expiration() time.Duration { return s.exp }

// SetDown makes every call fail (true), as an unreachable store, or
// succeed again.
func (s *MemStore) SetDown(d bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = d
}

func (s *MemStore) rec(p int32) *memRec {
	if int(p) >= len(s.recs) {
		s.recs = append(s.recs, make([]*memRec, int(p)+1-len(s.recs))...)
	}
	r := s.recs[p]
	if r == nil {
		r = &memRec{}
		s.recs[p] = r
	}
	return r
}

func (s *MemStore) enter() error {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return ErrDown
	}
	return nil
}

// Renew implements ownership.Store.
func (s *MemStore) Renew(_ context.Context, owner string, partitions []int32, held []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	return s.renew(owner, partitions, held, 0)
}

// RenewSince implements ownership.Tracker.
func (s *MemStore) RenewSince(_ context.Context, owner string, partitions []int32, held []ownership.Lease, since int64) (ownership.Table, []ownership.Outcome, error) {
	return s.renew(owner, partitions, held, since)
}

func (s *MemStore) renew(owner string, partitions []int32, held []ownership.Lease, since int64) (ownership.Table, []ownership.Outcome, error) {
	if err := s.enter(); err != nil {
		return ownership.Table{}, nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	outs := make([]ownership.Outcome, len(held))
	for i, l := range held {
		r := s.rec(l.Partition)
		if r.owner == owner && r.epoch == l.Epoch && now.Sub(r.modified) <= s.exp {
			r.modified = now
			r.version++
			s.renewed(l.Partition, now)
		} else {
			outs[i] = ownership.Fenced
		}
	}
	_, had := s.members[owner]
	s.members[owner] = now
	if !had {
		s.ids = nil
	}
	changed := !had
	t := ownership.Table{Now: now, Fresh: !had}
	if s.ids == nil {
		for id := range s.members {
			s.ids = append(s.ids, id)
		}
		slices.SortFunc(s.ids, strings.Compare)
	}
	t.Members = make([]ownership.Member, 0, len(s.ids))
	kept := s.ids[:0]
	for _, id := range s.ids {
		at := s.members[id]
		if now.Sub(at) > s.exp {
			delete(s.members, id)
			changed = true
			continue
		}
		kept = append(kept, id)
		t.Members = append(t.Members, ownership.Member{ID: id, Age: now.Sub(at)})
	}
	s.ids = kept
	if s.lapsed(now) {
		changed = true
	}
	if changed {
		s.stamp++
	}
	t.Stamp = s.stamp
	if since != 0 && since == s.stamp {
		t.Members, t.Unchanged = nil, true
		return t, outs, nil
	}
	t.Owners = make([]ownership.Ownership, 0, len(partitions))
	for _, p := range partitions {
		r := s.rec(p)
		o := ownership.Ownership{Partition: p, Owner: r.owner, Epoch: r.epoch, Version: r.version, Modified: r.modified}
		if !r.modified.IsZero() {
			o.Age = now.Sub(r.modified)
		}
		if r.prev != "" {
			o.Previous, o.PreviousAge = r.prev, now.Sub(r.prevMod)
		}
		t.Owners = append(t.Owners, o)
	}
	return t, outs, nil
}

// Claim implements ownership.Store.
func (s *MemStore) Claim(_ context.Context, owner string, claims []ownership.Claim) ([]ownership.Lease, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	var won []ownership.Lease
	for _, c := range claims {
		r := s.rec(c.Partition)
		if r.version != c.Version {
			continue
		}
		live := r.owner != "" && r.owner != owner && now.Sub(r.modified) <= s.exp
		pending := r.prev != "" && now.Sub(r.prevMod) <= s.exp
		switch {
		case live && (!pending || r.prev == r.owner):
			held := r.epoch
			if r.heldEpoch != 0 {
				held = r.heldEpoch
			}
			r.prev, r.prevEpoch, r.prevMod = r.owner, held, r.modified
		case !pending:
			r.prev = ""
		}
		r.heldEpoch = 0
		r.bump(now)
		r.version++
		r.owner, r.modified = owner, now
		s.renewed(c.Partition, now)
		won = append(won, ownership.Lease{Partition: c.Partition, Epoch: r.epoch})
	}
	if len(won) > 0 {
		s.stamp++
	}
	return won, nil
}

// Relinquish implements ownership.Store.
func (s *MemStore) Relinquish(_ context.Context, owner string, held []ownership.Lease) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.now()
	for _, l := range held {
		r := s.rec(l.Partition)
		switch {
		case r.owner == owner && r.epoch == l.Epoch:
			r.owner, r.modified = "", now
			r.bump(now)
			r.version++
			s.stamp++
		case r.prev == owner && r.prevEpoch == l.Epoch:
			r.prev = "" // the old owner stopped it
			s.stamp++
		}
	}
	return nil
}

// Leave implements ownership.Store.
func (s *MemStore) Leave(_ context.Context, owner string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.members[owner]; ok {
		s.stamp++
	}
	delete(s.members, owner)
	s.ids = nil
	return nil
}

// Checkpoint implements ownership.Store.
func (s *MemStore) Checkpoint(_ context.Context, owner string, writes []ownership.Write) ([]ownership.Outcome, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	outs := make([]ownership.Outcome, len(writes))
	for i, w := range writes {
		r := s.rec(w.Partition)
		ck, ok := s.cks[w.Partition]
		switch {
		case r.owner != owner || r.epoch != w.Epoch || now.Sub(r.modified) > s.exp:
			outs[i] = ownership.Fenced
		case ok && ck.Offset > w.Offset:
			outs[i] = ownership.Behind
		default:
			s.cks[w.Partition] = ownership.Checkpoint{Partition: w.Partition, Offset: w.Offset, Sequence: w.Sequence, Epoch: w.Epoch, Owner: owner, Written: now}
		}
	}
	return outs, nil
}

// Checkpoints implements ownership.Store.
func (s *MemStore) Checkpoints(_ context.Context, partitions []int32) ([]ownership.Checkpoint, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]ownership.Checkpoint, len(partitions))
	for i, p := range partitions {
		if ck, ok := s.cks[p]; ok {
			out[i] = ck
		} else {
			out[i] = ownership.Checkpoint{Partition: p, Offset: -1, Sequence: -1}
		}
	}
	return out, nil
}

// SetCheckpoint implements ownership.Store.
func (s *MemStore) SetCheckpoint(_ context.Context, partition int32, offset int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := s.now()
	r := s.rec(partition)
	if r.owner != "" && r.heldEpoch == 0 {
		r.heldEpoch = r.epoch
	}
	r.bump(now)
	r.version++
	s.stamp++
	s.cks[partition] = ownership.Checkpoint{Partition: partition, Offset: offset, Sequence: -1, Epoch: r.epoch, Written: now}
	return nil
}

// bump raises the epoch as the scripts do: to the greater of epoch+1 and
// the time in microseconds.
func (r *memRec) bump(now time.Time) { r.epoch = max(r.epoch+1, now.UnixMicro()) }

// Wipe loses every record, as a Redis restarted without persistence.
func (s *MemStore) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs, s.cks, s.members, s.ids, s.lapses = nil, map[int32]ownership.Checkpoint{}, map[string]time.Time{}, nil, nil
	s.stamp++ // a stamp read before the loss never matches one after it
}

// Owner returns partition p's owner and epoch.
func (s *MemStore) Owner(p int32) (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec(p)
	return r.owner, r.epoch
}

// Offset returns partition p's checkpoint, -1 if none.
func (s *MemStore) Offset(p int32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ck, ok := s.cks[p]; ok {
		return ck.Offset
	}
	return -1
}

// EpochSum returns the sum of every partition's epoch: it changes with
// every claim, relinquish and rewind, so a run over which it stands still
// moved nothing.
func (s *MemStore) EpochSum() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e int64
	for _, r := range s.recs {
		if r != nil {
			e += r.epoch
		}
	}
	return e
}

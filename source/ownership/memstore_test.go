package ownership_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// memStore is an ownership.Store in memory with the Redis scripts'
// semantics, on time.Now — the fake clock inside a synctest bubble — for
// the balancer's time-dependent tests. down makes every call fail, as an
// unreachable store.
type memStore struct {
	mu      sync.Mutex
	exp     time.Duration
	recs    map[int32]*memRec
	cks     map[int32]ownership.Checkpoint
	members map[string]time.Time
	down    bool
	calls   int
}

type memRec struct {
	owner    string
	epoch    int64
	version  int64
	modified time.Time
}

var errDown = errors.New("memstore: down")

func newMemStore(exp time.Duration) *memStore {
	return &memStore{exp: exp, recs: map[int32]*memRec{}, cks: map[int32]ownership.Checkpoint{}, members: map[string]time.Time{}}
}

func (s *memStore) Expiration() time.Duration { return s.exp }

func (s *memStore) setDown(d bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = d
}

func (s *memStore) rec(p int32) *memRec {
	r := s.recs[p]
	if r == nil {
		r = &memRec{}
		s.recs[p] = r
	}
	return r
}

func (s *memStore) enter() error {
	s.mu.Lock()
	s.calls++
	if s.down {
		s.mu.Unlock()
		return errDown
	}
	return nil
}

func (s *memStore) Renew(_ context.Context, owner string, partitions []int32, held []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	if err := s.enter(); err != nil {
		return ownership.Table{}, nil, err
	}
	defer s.mu.Unlock()
	now := time.Now()
	outs := make([]ownership.Outcome, len(held))
	for i, l := range held {
		r := s.rec(l.Partition)
		if r.owner == owner && r.epoch == l.Epoch && now.Sub(r.modified) <= s.exp {
			r.modified = now
			r.version++
		} else {
			outs[i] = ownership.Fenced
		}
	}
	_, had := s.members[owner]
	s.members[owner] = now
	t := ownership.Table{Now: now, Fresh: !had}
	for id, at := range s.members {
		if now.Sub(at) > s.exp {
			delete(s.members, id)
			continue
		}
		t.Members = append(t.Members, ownership.Member{ID: id, Age: now.Sub(at)})
	}
	slices.SortFunc(t.Members, func(a, b ownership.Member) int { return cmpString(a.ID, b.ID) })
	for _, p := range partitions {
		r := s.rec(p)
		o := ownership.Ownership{Partition: p, Owner: r.owner, Epoch: r.epoch, Version: r.version, Modified: r.modified}
		if !r.modified.IsZero() {
			o.Age = now.Sub(r.modified)
		}
		t.Owners = append(t.Owners, o)
	}
	return t, outs, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *memStore) Claim(_ context.Context, owner string, claims []ownership.Claim) ([]ownership.Lease, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var won []ownership.Lease
	for _, c := range claims {
		r := s.rec(c.Partition)
		if r.version != c.Version {
			continue
		}
		r.bump()
		r.version++
		r.owner, r.modified = owner, time.Now()
		won = append(won, ownership.Lease{Partition: c.Partition, Epoch: r.epoch})
	}
	return won, nil
}

func (s *memStore) Relinquish(_ context.Context, owner string, held []ownership.Lease) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, l := range held {
		if r := s.rec(l.Partition); r.owner == owner && r.epoch == l.Epoch {
			r.owner, r.modified = "", time.Now()
			r.bump()
			r.version++
		}
	}
	return nil
}

func (s *memStore) Leave(_ context.Context, owner string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.members, owner)
	return nil
}

func (s *memStore) Checkpoint(_ context.Context, owner string, writes []ownership.Write) ([]ownership.Outcome, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := time.Now()
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

func (s *memStore) Checkpoints(_ context.Context, partitions []int32) ([]ownership.Checkpoint, error) {
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

func (s *memStore) SetCheckpoint(_ context.Context, partition int32, offset int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	r := s.rec(partition)
	r.bump()
	r.version++
	s.cks[partition] = ownership.Checkpoint{Partition: partition, Offset: offset, Sequence: -1, Epoch: r.epoch, Written: time.Now()}
	return nil
}

// bump raises the epoch as the scripts do: to the greater of epoch+1 and
// the time in microseconds.
func (r *memRec) bump() { r.epoch = max(r.epoch+1, time.Now().UnixMicro()) }

// wipe loses every record, as a Redis restarted without persistence.
func (s *memStore) wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs, s.cks, s.members = map[int32]*memRec{}, map[int32]ownership.Checkpoint{}, map[string]time.Time{}
}

func (s *memStore) owner(p int32) (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec(p)
	return r.owner, r.epoch
}

func (s *memStore) checkpoint(p int32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ck, ok := s.cks[p]; ok {
		return ck.Offset
	}
	return -1
}

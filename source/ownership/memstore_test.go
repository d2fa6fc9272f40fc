package ownership_test

import (
	"time"

	"github.com/sluice-streams/sluice/internal/ownsim"
)

// memStore is the in-memory store with the Redis scripts' semantics
// (internal/ownsim's), on time.Now — the fake clock inside a synctest
// bubble — for the balancer's time-dependent tests.
type memStore struct{ *ownsim.MemStore }

var errDown = ownsim.ErrDown

func newMemStore(exp time.Duration) *memStore {
	return &memStore{ownsim.NewMemStore(exp, time.Now)}
}

func (s *memStore) setDown(d bool)                { s.SetDown(d) }
func (s *memStore) wipe()                         { s.Wipe() }
func (s *memStore) owner(p int32) (string, int64) { return s.Owner(p) }
func (s *memStore) checkpoint(p int32) int64      { return s.Offset(p) }

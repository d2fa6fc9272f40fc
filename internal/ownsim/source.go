package ownsim

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// rate is how many records a running partition settles per second of
// simulated time: its checkpoints move at every commit.
const rate = 100

// source is one member's partitioned source: it reads nothing, reports a
// settled offset that advances with time from where each partition
// started, and tells the recorder of every start and stop.
type source struct {
	id    string
	parts []int32
	clock Clock
	rec   *recorder
	done  Signal // fired when the member's pipeline ends

	mu      sync.Mutex
	running map[int32]started
}

type started struct {
	offset int64
	at     time.Time
}

func newSource(id string, parts []int32, clock Clock, rec *recorder, done Signal) *source {
	return &source{id: id, parts: parts, clock: clock, rec: rec, done: done, running: map[int32]started{}}
}

// Run returns when the member's pipeline ends (its done signal, fired
// with the cancel of its context).
func (s *source) Run(context.Context, *stream.Outlet[struct{}]) error {
	s.done.Wait(-1)
	return nil
}

func (s *source) Partitions(context.Context) ([]int32, error) { return s.parts, nil }

func (s *source) Start(p int32, offset int64) {
	now := s.clock.Now()
	s.mu.Lock()
	s.running[p] = started{offset: max(offset, 0), at: now}
	s.mu.Unlock()
	s.rec.start(s.id, p, now)
}

func (s *source) Stop(p int32) {
	now := s.clock.Now()
	s.mu.Lock()
	delete(s.running, p)
	s.mu.Unlock()
	s.rec.stop(s.id, p, now)
}

func (s *source) Settled(p int32) (int64, bool) {
	s.mu.Lock()
	st, ok := s.running[p]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	n := int64(s.clock.Now().Sub(st.at) * rate / time.Second)
	return st.offset + n, n > 0
}

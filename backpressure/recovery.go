package backpressure

import (
	"sync"
	"time"
)

// Recovery remembers when each of a set of breakers last closed again —
// its dependency answered a probe after an outage — and signals it, so
// that work parked because of that dependency can be replayed as soon as
// it is back rather than at its scheduled time (see sink/kafka's
// ReplayDue and flow.Recheck).
//
// Give its OnStateChange to the breakers it watches (BreakerConfig); they
// are told apart by name.
type Recovery struct {
	mu sync.Mutex
	at map[string]time.Time
	c  chan struct{}
}

// NewRecovery returns a Recovery that has seen none.
func NewRecovery() *Recovery {
	return &Recovery{at: map[string]time.Time{}, c: make(chan struct{}, 1)}
}

// OnStateChange is a BreakerConfig.OnStateChange: a breaker that closes
// (its half-open probes succeeded) records the time under its name and
// signals C. It never blocks.
func (r *Recovery) OnStateChange(name string, _, to BreakerState) {
	if to != Closed {
		return
	}
	r.mu.Lock()
	r.at[name] = time.Now()
	r.mu.Unlock()
	select {
	case r.c <- struct{}{}:
	default:
	}
}

// At is when the named breaker last closed again (zero: it never did).
func (r *Recovery) At(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[name]
}

// C receives after a breaker closed again: one signal stands for any
// number of recoveries since it was last received. It has one reader.
func (r *Recovery) C() <-chan struct{} { return r.c }

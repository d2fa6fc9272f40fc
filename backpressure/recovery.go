package backpressure

import (
	"sync"
	"sync/atomic"
	"time"
)

// Recovery remembers when each of a set of breakers last closed again —
// its dependency answered a probe after an outage — and signals it, so
// that work parked because of that dependency can be replayed as soon as
// it is back rather than at its scheduled time (see sink/kafka's
// ReplayDue and flow.Recheck).
//
// It learns of a recovery in one of two ways, each under a name: give its
// OnStateChange to the breakers it watches (BreakerConfig), or report the
// outcome of each call to a dependency that has no breaker to the
// function Watch returns.
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
	if to == Closed {
		r.recovered(name)
	}
}

func (r *Recovery) recovered(name string) {
	r.mu.Lock()
	r.at[name] = time.Now()
	r.mu.Unlock()
	select {
	case r.c <- struct{}{}:
	default:
	}
}

// Watch returns the function to tell of every call to the dependency
// name, whether it succeeded (from any goroutine): the first success after
// at least streak failures in a row is a recovery. A dependency down fails
// every call, so its return ends a long streak; one failing now and then
// seldom fails streak calls in a row, and its parked work keeps its own
// time.
func (r *Recovery) Watch(name string, streak int) func(ok bool) {
	var failed atomic.Int64
	return func(ok bool) {
		if !ok {
			failed.Add(1)
			return
		}
		if failed.Load() == 0 {
			return // the common case: no write
		}
		if failed.Swap(0) >= int64(streak) {
			r.recovered(name)
		}
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

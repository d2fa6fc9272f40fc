package delivery

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FaultSet holds the faults the services show now or will show, each
// with its start and end. Its Inject wraps HTTPHandler so that every call
// meets the faults of its service at the time it arrives; Run takes the
// services down and brings them back at the scheduled times. Make one
// with NewFaultSet; its methods may be called from any goroutine.
type FaultSet struct {
	setDown func(down bool)

	mu      sync.Mutex // orders the changes and the calls of setDown
	faults  atomic.Pointer[[]scheduledFault]
	down    bool          // as setDown was last told
	changed chan struct{} // wakes Run when the schedule changes
}

// scheduledFault is a fault with its times; a zero end: until cleared.
type scheduledFault struct {
	f          Fault
	start, end time.Time
}

func (s scheduledFault) activeAt(now time.Time) bool {
	return !now.Before(s.start) && (s.end.IsZero() || now.Before(s.end))
}

// maxEndedFaults bounds the ended faults a set keeps for its listing.
const maxEndedFaults = 100

// ScheduledFault is a fault of a FaultSet as FaultsHandler lists it.
type ScheduledFault struct {
	Fault Fault `json:"fault"`
	// Spec is Fault as text (see ParseFault).
	Spec string `json:"spec"`
	// State is "scheduled", "active" or "ended" at the time of listing.
	State string `json:"state"`
	// Starts is when the fault starts (or started); Ends when it ends (or
	// ended), nil for a fault that lasts until cleared.
	Starts time.Time  `json:"starts"`
	Ends   *time.Time `json:"ends,omitempty"`
}

// NewFaultSet returns an empty set. setDown, if not nil, is told each
// time the services must go down (true) or come back (false): at once
// from Add and Clear, at the scheduled time from Run. It should close the
// services' listener and their open connections, and listen on the same
// address again. Without it, or until it has acted, a call that arrives
// while the services are down has its connection closed unanswered.
func NewFaultSet(setDown func(down bool)) *FaultSet {
	s := &FaultSet{setDown: setDown, changed: make(chan struct{}, 1)}
	s.faults.Store(&[]scheduledFault{})
	return s
}

// Add schedules f from the time from (f.After counted from it) and
// returns it as listed. A fault that does not validate is an error.
func (s *FaultSet) Add(f Fault, from time.Time) (ScheduledFault, error) {
	if err := f.Validate(); err != nil {
		return ScheduledFault{}, err
	}
	sf := scheduledFault{f: f, start: from.Add(f.After)}
	if f.For > 0 {
		sf.end = sf.start.Add(f.For)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.faults.Load()
	next := make([]scheduledFault, 0, len(old)+1)
	ended := 0
	for i := len(old) - 1; i >= 0; i-- { // keep the latest ended ones
		if e := old[i].end; !e.IsZero() && !now.Before(e) {
			if ended++; ended > maxEndedFaults {
				continue
			}
		}
		next = append(next, old[i])
	}
	slices.Reverse(next)
	next = append(next, sf)
	s.update(next, now)
	return sf.listed(now), nil
}

// Clear ends every fault that is active or scheduled, now, and returns
// how many it ended.
func (s *FaultSet) Clear() int {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.faults.Load()
	next := make([]scheduledFault, len(old))
	n := 0
	for i, sf := range old {
		if sf.end.IsZero() || now.Before(sf.end) {
			n++
			sf.end = now
			if now.Before(sf.start) {
				sf.start = now
			}
		}
		next[i] = sf
	}
	s.update(next, now)
	return n
}

// update publishes faults, tells setDown if the services go down or come
// back, and wakes Run. s.mu is held.
func (s *FaultSet) update(faults []scheduledFault, now time.Time) {
	s.faults.Store(&faults)
	s.settle(now)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// settle tells setDown the state the schedule says for now, if it
// changed. s.mu is held.
func (s *FaultSet) settle(now time.Time) {
	down := false
	for _, sf := range *s.faults.Load() {
		down = down || sf.f.Down && sf.activeAt(now)
	}
	if down != s.down {
		s.down = down
		if s.setDown != nil {
			s.setDown(down)
		}
	}
}

// List returns every fault, scheduled, active and the last that ended,
// in the order they were added.
func (s *FaultSet) List() []ScheduledFault {
	now := time.Now()
	faults := *s.faults.Load()
	out := make([]ScheduledFault, len(faults))
	for i, sf := range faults {
		out[i] = sf.listed(now)
	}
	return out
}

func (sf scheduledFault) listed(now time.Time) ScheduledFault {
	l := ScheduledFault{Fault: sf.f, Spec: sf.f.String(), Starts: sf.start, State: "active"}
	if !sf.end.IsZero() {
		end := sf.end
		l.Ends = &end
	}
	switch {
	case now.Before(sf.start):
		l.State = "scheduled"
	case !sf.activeAt(now):
		l.State = "ended"
	}
	return l
}

// Run takes the services down and brings them back (through setDown) at
// the times the schedule says, until ctx is done. A fault added later is
// taken into account at once.
func (s *FaultSet) Run(ctx context.Context) {
	for {
		now := time.Now()
		s.mu.Lock()
		s.settle(now)
		s.mu.Unlock()
		var next time.Time
		for _, sf := range *s.faults.Load() {
			if !sf.f.Down {
				continue
			}
			for _, t := range []time.Time{sf.start, sf.end} {
				if t.After(now) && (next.IsZero() || t.Before(next)) {
					next = t
				}
			}
		}
		var wake <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(next.Sub(now))
			wake = t.C
		}
		select {
		case <-ctx.Done():
		case <-s.changed:
		case <-wake:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Inject wraps h, served as HTTPHandler serves the backends, so that each
// call meets the faults active for its service when it arrives: its extra
// latency first, then its status instead of an answer. A call that
// arrives while the services are down has its connection closed.
func (s *FaultSet) Inject(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		faults := *s.faults.Load()
		if len(faults) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		service := serviceOfPath(r.URL.Path)
		var latency time.Duration
		var status *scheduledFault
		now := time.Now()
		for i := range faults {
			sf := &faults[i]
			if !sf.activeAt(now) || sf.f.Service != "all" && sf.f.Service != service {
				continue
			}
			if sf.f.Down {
				// Between the start of the fault and setDown's closing
				// of the connections: no answer, as from a dead process.
				panic(http.ErrAbortHandler)
			}
			latency += sf.f.Latency
			if sf.f.Status != 0 {
				status = sf // the last added wins
			}
		}
		if latency > 0 {
			t := time.NewTimer(latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if status != nil {
			http.Error(w, fmt.Sprintf("%s: failing on purpose (fault %s)", service, status.f), status.f.Status)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serviceOfPath is the service a path of HTTPHandler calls: its first
// segment ("/drones/d-1" calls drones).
func serviceOfPath(path string) string {
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return first
}

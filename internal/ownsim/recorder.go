package ownsim

import (
	"sync"
	"time"
)

// recorder follows which member runs which partition, from the sources'
// starts and stops: it counts overlaps (a partition started on a member
// while another runs it) and their length, moves (a start on a member
// other than the partition's previous one), and whether the shares are
// fair.
type recorder struct {
	mu       sync.Mutex
	runners  [][]string  // per partition: the members running it
	since    []time.Time // per partition: when its overlap began
	prev     []string    // per partition: the member that last started it
	owned    map[string]int
	live     map[string]bool
	crashed  map[string]bool
	covered  int // partitions running somewhere
	overlaps int
	overlap  time.Duration
	moved    int
	starts   int
	changed  time.Time // the last start or stop
	fair     bool
	fairAt   time.Time // when the shares last became fair
}

func newRecorder(partitions int) *recorder {
	return &recorder{runners: make([][]string, partitions), since: make([]time.Time, partitions), prev: make([]string, partitions),
		owned: map[string]int{}, live: map[string]bool{}, crashed: map[string]bool{}}
}

// join counts member among the live ones (those the shares are fair
// among); leave stops counting it.
func (r *recorder) join(member string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[member] = true
	delete(r.crashed, member)
	r.judge(now)
}

func (r *recorder) leave(member string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, member)
	r.judge(now)
}

// crash stops every partition member runs, at once: a crashed process
// processes nothing, whatever its balancer does next.
func (r *recorder) crash(member string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, rs := range r.runners {
		for _, id := range rs {
			if id == member {
				r.remove(member, int32(p), now)
				break
			}
		}
	}
	r.crashed[member] = true
	delete(r.live, member)
	r.judge(now)
}

func (r *recorder) start(member string, p int32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.crashed[member] {
		return
	}
	r.starts++
	if prev := r.prev[p]; prev != "" && prev != member {
		r.moved++
	}
	r.prev[p] = member
	rs := r.runners[p]
	if len(rs) > 0 {
		r.overlaps++
		if len(rs) == 1 {
			r.since[p] = now
		}
	} else {
		r.covered++
	}
	r.runners[p] = append(rs, member)
	r.owned[member]++
	r.changed = now
	r.judge(now)
}

func (r *recorder) stop(member string, p int32, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.crashed[member] {
		return
	}
	r.remove(member, p, now)
	r.judge(now)
}

func (r *recorder) remove(member string, p int32, now time.Time) {
	rs := r.runners[p]
	for i, id := range rs {
		if id != member {
			continue
		}
		if len(rs) == 2 {
			r.overlap += now.Sub(r.since[p])
		}
		r.runners[p] = append(rs[:i:i], rs[i+1:]...)
		if len(r.runners[p]) == 0 {
			r.covered--
		}
		r.owned[member]--
		r.changed = now
		return
	}
}

// judge updates whether the shares are fair: every partition runs
// somewhere, and the live members' counts differ by at most one. Called
// with mu held.
func (r *recorder) judge(now time.Time) {
	fair := r.covered == len(r.runners) && len(r.live) > 0
	if fair {
		lo, hi := -1, 0
		for id := range r.live {
			n := r.owned[id]
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		fair = hi-lo <= 1
	}
	if fair && !r.fair {
		r.fairAt = now
	}
	r.fair = fair
}

// snapshot is what the recorder counted up to a moment.
type snapshot struct {
	overlaps int
	overlap  time.Duration
	moved    int
	starts   int
	fair     bool
	fairAt   time.Time
	changed  time.Time
	owned    map[string]int // of the live members
	prev     []string
}

func (r *recorder) snapshot(now time.Time) snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := snapshot{overlaps: r.overlaps, overlap: r.overlap, moved: r.moved, starts: r.starts, fair: r.fair, fairAt: r.fairAt,
		changed: r.changed, owned: map[string]int{}, prev: append([]string(nil), r.prev...)}
	for p, rs := range r.runners {
		if len(rs) >= 2 {
			s.overlap += now.Sub(r.since[p]) // still overlapping
		}
	}
	for id := range r.live {
		s.owned[id] = r.owned[id]
	}
	return s
}

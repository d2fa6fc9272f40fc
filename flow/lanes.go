package flow

import (
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
)

// Lanes makes MapAsync serve its messages by their level of priority
// (Envelope.Priority, set by source.Priority or Prioritize) instead of in
// arrival order: every free slot goes to the level the policy p chooses
// among those waiting (backpressure.StrictPriority, WeightedPriority, with
// Aging measured from each message's Timestamp), so a queued low call
// never starts while a high one waits; calls in flight are never cut.
//
// reserve, one number per level (default: none reserved), is the
// parallelism kept for each level while it has work waiting (a pool per
// priority): another level takes a slot kept for a waiting level only
// when its own reservation allows, and a level with nothing waiting lends
// its reservation to the others, so nothing is wasted when high is quiet.
// The reservations may add up to at most the stage's parallelism.
//
// A message whose level is not one of p's levels fails with a reason
// wrapping ErrPriorityOutOfRange (it is never served as high).
func Lanes(p backpressure.Priority, reserve ...int) AsyncOption {
	return func(o *asyncOptions) { o.lanes = &laneConfig{p: p, reserve: append([]int(nil), reserve...)} }
}

type laneConfig struct {
	p       backpressure.Priority
	reserve []int
}

func (c *laneConfig) validate(parallelism int) (arg, reason string) {
	if err := c.p.Validate(); err != nil {
		return "Lanes", err.Error()
	}
	if len(c.reserve) != 0 && len(c.reserve) != c.p.Levels() {
		return "Lanes", fmt.Sprintf("need one reservation per level (%d), got %d", c.p.Levels(), len(c.reserve))
	}
	sum := 0
	for l, r := range c.reserve {
		if r < 0 {
			return "Lanes", fmt.Sprintf("level %d: a reservation must not be negative, got %d", l, r)
		}
		sum += r
	}
	if sum > parallelism {
		return "Lanes", fmt.Sprintf("reservations add up to %d, more than the parallelism %d", sum, parallelism)
	}
	return "", ""
}

// lanes is the ready queue of a stage with Lanes: a queue per level, the
// calls each level has in flight, and the picker.
type lanes[In, Out any] struct {
	cfg     *laneConfig
	pk      *backpressure.Picker
	q       []fifo[*asyncJob[In, Out]]
	running []int
	since   []int64 // scratch for the picker
	n       int     // jobs queued, all levels
}

func newLanes[In, Out any](c *laneConfig) *lanes[In, Out] {
	n := c.p.Levels()
	return &lanes[In, Out]{cfg: c, pk: c.p.NewPicker(), q: make([]fifo[*asyncJob[In, Out]], n),
		running: make([]int, n), since: make([]int64, n)}
}

func (l *lanes[In, Out]) push(j *asyncJob[In, Out]) {
	l.q[j.msg.Priority].push(j)
	l.n++
}

// pop takes the next job to start when free slots are free: from the level
// the policy chooses among those allowed, a level being allowed when it is
// within its reservation or when starting it leaves the reservations of
// the other waiting levels whole. There always is one (see below).
func (l *lanes[In, Out]) pop(free int) *asyncJob[In, Out] {
	var now int64
	if l.pk.Ages() {
		now = time.Now().UnixNano()
	}
	owed := 0 // slots kept for waiting levels below their reservation
	for lv := range l.q {
		if l.q[lv].len() > 0 {
			owed += l.kept(lv)
		}
	}
	for lv := range l.q {
		l.since[lv] = backpressure.NotReady
		if l.q[lv].len() == 0 {
			continue
		}
		// Allowed: within its own reservation, or a slot is left once the
		// others' are kept. A waiting level below its reservation is
		// always allowed; if none is, nothing is kept and every waiting
		// level is allowed: so some level always is.
		if l.kept(lv) > 0 || free-owed > 0 {
			l.since[lv] = 1 // ready; without aging no time is compared
			if l.pk.Ages() {
				// Aging counts from the message's Timestamp; one without
				// does not age.
				l.since[lv] = now
				if ts := l.q[lv].items[l.q[lv].head].msg.Timestamp.UnixNano(); ts > 0 {
					l.since[lv] = ts
				}
			}
		}
	}
	lv := l.pk.Pick(l.since, now)
	j := l.q[lv].pop()
	l.n--
	l.running[lv]++
	return j
}

// kept is how many slots level lv's reservation still keeps for it.
func (l *lanes[In, Out]) kept(lv int) int {
	if len(l.cfg.reserve) == 0 {
		return 0
	}
	return max(0, l.cfg.reserve[lv]-l.running[lv])
}

// finished counts a call of j's level as no longer in flight.
func (l *lanes[In, Out]) finished(j *asyncJob[In, Out]) { l.running[j.msg.Priority]-- }

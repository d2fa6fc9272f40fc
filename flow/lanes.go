package flow

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
)

// Lanes makes MapAsync serve its messages by their level of priority
// (Envelope.Priority, set by source.Priority or Prioritize) instead of in
// arrival order: every free slot goes to the level the policy p chooses
// among those waiting (backpressure.StrictPriority, WeightedPriority, with
// Aging), so a queued low call never starts while a high one waits; calls
// in flight are never cut. Aging measures a message's wait from its
// arrival in the stage, or from its Timestamp where that is when the
// broker appended it (Envelope.AppendTime: a Kafka topic with
// LogAppendTime), so that a backlog at the broker ages; a timestamp its
// producer chose is not used, since a clock behind or a backfill of old
// data would make a fresh low message look old and start before high.
//
// reserve, one number per level (default: none reserved), is the
// parallelism kept for each level while it has work waiting (a pool per
// priority): another level takes a slot kept for a waiting level only
// when its own reservation allows, and a level with nothing waiting lends
// its reservation to the others, so nothing is wasted when high is quiet.
// The reservations may add up to at most the stage's parallelism; while a
// limiter (WithLimiter) holds the calls in flight below their sum, they
// are scaled down to its limit, one slot each at least.
//
// A message whose level is not one of p's levels fails with a reason
// wrapping ErrPriorityOutOfRange (it is never served as high).
func Lanes(p backpressure.Priority, reserve ...int) AsyncOption {
	return func(o *asyncOptions) {
		o.lanes = &laneConfig{p: p, reserve: append([]int(nil), reserve...)}
		if n := p.Levels(); n >= 1 && n <= backpressure.MaxLevels {
			o.lanes.counters = newLaneCounters(n)
		}
	}
}

type laneConfig struct {
	p        backpressure.Priority
	reserve  []int
	counters *laneCounters // nil only for a policy Validate refuses
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
// calls each level has in flight, the picker, and the level's numbers.
type lanes[In, Out any] struct {
	cfg     *laneConfig
	pk      *backpressure.Picker
	q       []fifo[*asyncJob[In, Out]]
	ahead   []fifo[*asyncJob[In, Out]] // ServeFirst's and retries, served before q at their level
	running []int
	since   []int64 // scratch for the picker
	// reserve is the reservations fitted to the limit they were last
	// fitted to (fitted): scaled down when they add up to more.
	reserve []int
	fitted  int
	n       int // jobs queued, all levels
	c       *laneCounters
	meters  []laneMeter // the registrations' histograms, fixed at the run's start
	// now is the time of the stage's current step (tick): one clock read
	// per step, not one per message, for waits, latencies and aging.
	now time.Time
}

// tick reads the clock for the stage's next step.
func (l *lanes[In, Out]) tick() { l.now = time.Now() }

func newLanes[In, Out any](c *laneConfig, ms *[]asyncMeter) *lanes[In, Out] {
	n := c.p.Levels()
	l := &lanes[In, Out]{cfg: c, pk: c.p.NewPicker(), q: make([]fifo[*asyncJob[In, Out]], n), ahead: make([]fifo[*asyncJob[In, Out]], n),
		running: make([]int, n), since: make([]int64, n), c: c.counters, fitted: -1}
	if len(c.reserve) > 0 {
		l.reserve = make([]int, n)
	}
	if ms != nil {
		for _, m := range *ms {
			if m.lanes.wait != nil {
				l.meters = append(l.meters, m.lanes)
			}
		}
	}
	return l
}

// arrived stamps a job entering the stage with the time its wait counts
// from (backpressure.WaitStart): now, or its broker's append time.
func (l *lanes[In, Out]) arrived(j *asyncJob[In, Out]) {
	j.since = l.now
	if j.msg.AppendTime {
		j.since = time.Unix(0, backpressure.WaitStart(j.msg.Timestamp, true, l.now.UnixNano()))
	}
}

func (l *lanes[In, Out]) push(j *asyncJob[In, Out]) {
	if j.goesAhead() {
		l.ahead[j.msg.Priority].push(j)
	} else {
		l.q[j.msg.Priority].push(j)
	}
	l.n++
	l.c.levels[j.msg.Priority].waiting.Add(1)
}

// pop takes the next job to start when free slots are free under limit:
// from the level the policy chooses among those allowed, a level being
// allowed when it is within its reservation or when starting it leaves
// the reservations of the other waiting levels whole. There always is one
// (see below).
func (l *lanes[In, Out]) pop(free, limit int) *asyncJob[In, Out] {
	if limit != l.fitted {
		l.fit(limit)
	}
	now := l.now
	owed := 0 // slots kept for waiting levels below their reservation
	for lv := range l.q {
		if l.waitingAt(lv) > 0 {
			owed += l.kept(lv)
		}
	}
	for lv := range l.q {
		l.since[lv] = backpressure.NotReady
		if l.waitingAt(lv) == 0 {
			continue
		}
		// Allowed: within its own reservation, or a slot is left once the
		// others' are kept. A waiting level below its reservation is
		// always allowed; if none is, nothing is kept and every waiting
		// level is allowed: so some level always is.
		if l.kept(lv) > 0 || free-owed > 0 {
			l.since[lv] = 1 // ready; without aging no time is compared
			if l.pk.Ages() {
				l.since[lv] = l.oldest(lv)
			}
		}
	}
	lv := l.pk.Pick(l.since, now.UnixNano())
	j := l.next(lv).pop()
	l.n--
	l.running[lv]++
	lc := &l.c.levels[lv]
	lc.waiting.Add(-1)
	lc.inFlight.Add(1)
	if j.attempts == 0 {
		lc.started.Add(1)
		for _, m := range l.meters {
			m.wait[lv](now.Sub(j.since).Seconds())
		}
	}
	j.callStart = now
	return j
}

// waitingAt is how many jobs of level lv wait for a slot.
func (l *lanes[In, Out]) waitingAt(lv int) int { return l.ahead[lv].len() + l.q[lv].len() }

// next is the queue level lv's next job comes from: ServeFirst's and
// retries first.
func (l *lanes[In, Out]) next(lv int) *fifo[*asyncJob[In, Out]] {
	if l.ahead[lv].len() > 0 {
		return &l.ahead[lv]
	}
	return &l.q[lv]
}

// oldest is when the wait of level lv's oldest waiting job began: the
// level ages from it, though the job served next may be one ServeFirst
// picked, which arrived since.
func (l *lanes[In, Out]) oldest(lv int) int64 {
	at := int64(math.MaxInt64)
	if q := &l.ahead[lv]; q.len() > 0 {
		at = q.items[q.head].since.UnixNano()
	}
	if q := &l.q[lv]; q.len() > 0 {
		at = min(at, q.items[q.head].since.UnixNano())
	}
	return at
}

// kept is how many slots level lv's reservation still keeps for it.
func (l *lanes[In, Out]) kept(lv int) int {
	if l.reserve == nil {
		return 0
	}
	return max(0, l.reserve[lv]-l.running[lv])
}

// fit scales the reservations to a limit below their sum (a limiter
// lowered under load): each keeps its share of the limit, one slot at
// least, so that a lower level's reservation still holds when the calls
// in flight are fewer than the reservations. Above their sum they are
// kept as given.
func (l *lanes[In, Out]) fit(limit int) {
	l.fitted = limit
	if l.reserve == nil {
		return
	}
	sum := 0
	for _, r := range l.cfg.reserve {
		sum += r
	}
	for lv, r := range l.cfg.reserve {
		l.reserve[lv] = r
		if sum > limit && r > 0 {
			l.reserve[lv] = max(1, r*limit/sum)
		}
	}
}

// finished counts a call of j's level as no longer in flight.
func (l *lanes[In, Out]) finished(j *asyncJob[In, Out]) {
	lv := j.msg.Priority
	l.running[lv]--
	lc := &l.c.levels[lv]
	lc.inFlight.Add(-1)
	lc.busy.Add(int64(l.now.Sub(j.callStart)))
}

// emitted counts j's outcome leaving the stage.
func (l *lanes[In, Out]) emitted(j *asyncJob[In, Out]) {
	lv := j.msg.Priority
	l.c.levels[lv].done.Add(1)
	if !j.skipped {
		l.c.levels[lv].called.Add(1) // the mean call time's count
	}
	if len(l.meters) > 0 {
		d := l.now.Sub(j.since).Seconds()
		for _, m := range l.meters {
			m.latency[lv](d)
		}
	}
}

// stopped zeroes the gauges when the run ends: what it held is no longer
// waiting or running here.
func (l *lanes[In, Out]) stopped() {
	for lv := range l.c.levels {
		l.c.levels[lv].waiting.Store(0)
		l.c.levels[lv].inFlight.Store(0)
	}
}

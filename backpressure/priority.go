package backpressure

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Priority says in which order levels of priority are served. Levels are
// numbered from 0, the highest. A policy is strict (a level is served only
// when every higher level has nothing ready) or weighted (levels with work
// ready share the service in proportion to their weights, exactly over
// every cycle of sum-of-weights picks: smooth weighted round-robin, work
// conserving, so a level with nothing ready lends its share to the
// others). Aging lifts a message that has waited past its level's MaxWait
// one level up, and on past the next level's MaxWait, so that nothing
// waits forever behind a busier level.
//
// Build one with StrictPriority or WeightedPriority, add aging with Aging,
// and use a Picker to choose, message after message.
type Priority struct {
	levels  int
	weights []int           // nil: strict
	maxWait []time.Duration // nil: no aging; [0] unused
}

// StrictPriority serves levels 0..levels-1 strictly in order.
func StrictPriority(levels int) Priority { return Priority{levels: levels} }

// WeightedPriority shares the service among len(weights) levels in
// proportion to weights (6, 3, 1: six high, three normal, one low in every
// ten picks while all three have work).
func WeightedPriority(weights ...int) Priority {
	return Priority{levels: len(weights), weights: append([]int(nil), weights...)}
}

// Aging returns p where a message of level i that has waited longer than
// maxWait[i] is served as if it were of level i-1 (and of i-2 past
// maxWait[i]+maxWait[i-1], and so on). Give one duration per level, each
// positive but level 0's, which is not used (nothing is above it): a
// level that never aged would hold back the climb of every level below
// it, so Validate refuses a MaxWait <= 0 there.
func (p Priority) Aging(maxWait ...time.Duration) Priority {
	p.maxWait = append([]time.Duration(nil), maxWait...)
	return p
}

// Levels returns the number of levels.
func (p Priority) Levels() int { return p.levels }

// Weighted reports whether p shares by weights (else it is strict).
func (p Priority) Weighted() bool { return p.weights != nil }

// Validate reports a bad policy: no levels, a weight below 1, a MaxWait
// list of the wrong length or with a duration <= 0 for a level but 0.
func (p Priority) Validate() error {
	switch {
	case p.levels < 1 || p.levels > MaxLevels:
		return configError("priority", "levels", "need 1 to %d levels, got %d", MaxLevels, p.levels)
	case p.maxWait != nil && len(p.maxWait) != p.levels:
		return configError("priority", "Aging", "need one MaxWait per level (%d), got %d", p.levels, len(p.maxWait))
	}
	for i, w := range p.weights {
		if w < 1 {
			return configError("priority", "weights", "level %d: weight must be at least 1, got %d", i, w)
		}
	}
	for i, d := range p.maxWait {
		if i > 0 && d <= 0 {
			return configError("priority", "Aging", "level %d: MaxWait must be positive, got %v (only level 0's is unused)", i, d)
		}
	}
	return nil
}

// String describes the policy ("strict", "weighted 6:3:1", with aging).
func (p Priority) String() string {
	s := "strict"
	if p.weights != nil {
		s = "weighted"
		for i, w := range p.weights {
			sep := ":"
			if i == 0 {
				sep = " "
			}
			s += fmt.Sprintf("%s%d", sep, w)
		}
	}
	if p.maxWait != nil {
		s += fmt.Sprintf(", aging %v", p.maxWait)
	}
	return s
}

// Picker chooses, one pick after another, the level to serve under a
// policy. It keeps the weighted round-robin's credits between picks. It
// is not safe for concurrent use: one stage owns it.
type Picker struct {
	p      Priority
	aging  bool
	credit []int // smooth weighted round-robin: current weights
	eff    []int // scratch: each level's effective level, -1 if not ready
}

// MaxLevels is the most levels a policy can have.
const MaxLevels = 64

// NewPicker returns a picker for p (p must be valid).
func (p Priority) NewPicker() *Picker {
	return &Picker{p: p, aging: p.maxWait != nil && p.levels > 1, credit: make([]int, p.levels), eff: make([]int, p.levels)}
}

// Ages reports whether the policy ages messages at any level: if not, Pick
// compares no times and the times given need only tell ready from not.
func (pk *Picker) Ages() bool { return pk.aging }

// Effective returns the level a message of level l that has waited
// waited is served as: l, or higher (smaller) with aging.
func (p Priority) Effective(l int, waited time.Duration) int {
	if p.maxWait == nil {
		return l
	}
	for l > 0 {
		d := p.maxWait[l]
		if d <= 0 || waited <= d { // d <= 0 only in an invalid policy
			break
		}
		waited -= d
		l--
	}
	return l
}

// NotReady in Pick's since says that a level has nothing ready. Every
// other value is a time, so a message stamped at the Unix epoch (0) is
// ready like any other.
const NotReady = math.MinInt64

// WaitStart returns when a message's wait began, for Pick's since: when
// the stage received it (received, Unix nanoseconds), or, if its
// timestamp ts is the time its broker appended it to the log (appended:
// a Kafka topic with LogAppendTime), ts, so that the time it waited in
// the broker counts too. A timestamp its producer chose is not used: a
// producer whose clock is behind, or a backfill of old data, would make
// fresh messages look as if they had waited for ages, and they would be
// served as high at once. Nor is an append time at or before the Unix
// epoch (none) or after received (a broker clock ahead of ours, or a time
// past the year 2262, where Unix nanoseconds wrap around and would make
// the message look decades old).
func WaitStart(ts time.Time, appended bool, received int64) int64 {
	if !appended {
		return received
	}
	return appendedSince(ts, received) // apart, so that WaitStart inlines: stages call it at every pick
}

func appendedSince(ts time.Time, received int64) int64 {
	// Compared in seconds first: ts.UnixNano is undefined past 2262.
	if s := ts.Unix(); s <= 0 || s > received/1e9 {
		return received
	}
	return min(ts.UnixNano(), received)
}

// Pick returns the level whose next message to serve, or -1 if none is
// ready. since[l] is when the wait of level l's oldest ready message
// began (WaitStart), in nanoseconds on any clock now is on (NotReady:
// level l has nothing ready); now matters only to a policy that ages.
//
// The policy chooses an effective level among those with a message ready
// (strict: the highest; weighted: by credits); among the levels whose
// oldest message has that effective level, the one that waited longest is
// served.
func (pk *Picker) Pick(since []int64, now int64) int {
	p := pk.p
	var ready uint64 // effective levels some ready level has
	for l := range p.levels {
		pk.eff[l] = -1
		if since[l] == NotReady {
			continue
		}
		e := l
		if pk.aging {
			e = p.Effective(l, time.Duration(now-since[l]))
		}
		pk.eff[l] = e
		ready |= 1 << e
	}
	if ready == 0 {
		return -1
	}
	e := pk.chooseEffective(ready)
	best := -1
	for l := range p.levels {
		if pk.eff[l] == e && (best < 0 || since[l] < since[best]) {
			best = l
		}
	}
	return best
}

// chooseEffective picks the effective level to serve among ready (a bit
// per effective level).
func (pk *Picker) chooseEffective(ready uint64) int {
	p := pk.p
	if p.weights == nil {
		return bits.TrailingZeros64(ready)
	}
	// Smooth weighted round-robin over the ready effective levels: each
	// gains its weight, the richest is chosen and pays the total. A level
	// with nothing ready drops its credit, so the share it leaves is spread
	// over the others (work conserving) and it builds no burst for later.
	total, chosen := 0, -1
	for e := range p.levels {
		if ready&(1<<e) == 0 {
			pk.credit[e] = 0
			continue
		}
		pk.credit[e] += p.weights[e]
		total += p.weights[e]
		if chosen < 0 || pk.credit[e] > pk.credit[chosen] {
			chosen = e
		}
	}
	pk.credit[chosen] -= total
	return chosen
}

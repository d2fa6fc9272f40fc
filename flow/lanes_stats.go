package flow

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// LaneStats is one level's numbers in a stage with Lanes.
type LaneStats struct {
	// Waiting counts the level's messages queued for a slot (retries
	// waiting for their next attempt excluded); InFlight its calls running.
	Waiting, InFlight int64
	// Started counts the level's messages whose first call started, Done
	// those whose outcome (result or failure) left the stage.
	Started, Done int64
	// Busy is the time the level's calls ran, summed over calls: Busy's
	// rate is the mean number of slots the level keeps busy.
	Busy time.Duration
	// DesiredWorkers is the parallelism the level would need to keep up
	// with what it is served now and drain its backlog within the
	// LaneScaling drain time (see LaneScaling); 0 until the level has
	// finished a call.
	DesiredWorkers int64

	called int64 // of Done, those that made a call (the mean call time's count)
}

// LaneScaling sets how a stage with Lanes estimates each level's desired
// workers (LaneStats.DesiredWorkers, the sluice_lane_desired_workers
// gauge): the slots the level keeps busy (its calls' running time per
// second, Little's law) plus those that would drain its backlog within
// drain, at its mean call time:
//
//	desired = ceil(busy time per second + backlog × mean call time / drain)
//
// The backlog is the level's queue in the stage (where messages SkipCall
// answers never wait: they need no call) plus, if backlog is
// given, backlog(level): what waits for the level upstream, not yet in
// the stage (a priority source's level: its source's Lag, the records not
// fetched yet, and what it has queued). Default: drain 10 s, the stage's
// own queue only. An autoscaler reads the gauge:
// a pool per level scaled on its own queue.
func LaneScaling(drain time.Duration, backlog func(level int) int64) AsyncOption {
	return func(o *asyncOptions) { o.laneDrain, o.laneBacklog = drain, backlog }
}

// laneCounters are the numbers of a stage's lanes, written by its run and
// read by Stats and metrics from any goroutine.
type laneCounters struct {
	levels []laneCounter

	mu   sync.Mutex // guards the estimate below (desired)
	last time.Time  // when prev was taken
	prev []laneSample
	est  []int64
}

type laneCounter struct {
	waiting, inFlight, started, done, busy atomic.Int64
	called                                 atomic.Int64 // done after a call: not answered by SkipCall
}

// laneSample is what a desired-workers estimate compares with the next.
type laneSample struct{ called, busy int64 }

func newLaneCounters(levels int) *laneCounters {
	return &laneCounters{levels: make([]laneCounter, levels), prev: make([]laneSample, levels), est: make([]int64, levels)}
}

// laneWindow is the shortest time over which desired workers are
// re-estimated; reads in between return the last estimate.
const laneWindow = time.Second

// stats returns each level's numbers, re-estimating desired workers when
// the last estimate is older than laneWindow.
func (c *laneCounters) stats(drain time.Duration, backlog func(int) int64) []LaneStats {
	st := make([]LaneStats, len(c.levels))
	for l := range c.levels {
		lc := &c.levels[l]
		st[l] = LaneStats{Waiting: lc.waiting.Load(), InFlight: lc.inFlight.Load(), Started: lc.started.Load(),
			Done: lc.done.Load(), Busy: time.Duration(lc.busy.Load()), called: lc.called.Load()}
	}
	if drain <= 0 {
		drain = 10 * time.Second
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if el := now.Sub(c.last); c.last.IsZero() || el >= laneWindow {
		for l := range st {
			dDone, dBusy := st[l].called-c.prev[l].called, int64(st[l].Busy)-c.prev[l].busy
			if c.last.IsZero() || dDone <= 0 {
				// No call finished in the window: keep the estimate, unless
				// the level is idle (nothing waits, nothing runs).
				if st[l].Waiting == 0 && st[l].InFlight == 0 && !c.last.IsZero() {
					c.est[l] = 0
				}
				continue
			}
			q := st[l].Waiting
			if backlog != nil {
				q += max(0, backlog(l))
			}
			mean := float64(dBusy) / float64(dDone)
			c.est[l] = int64(math.Ceil(float64(dBusy)/float64(el) + float64(q)*mean/float64(drain)))
		}
		for l := range st {
			c.prev[l] = laneSample{called: st[l].called, busy: int64(st[l].Busy)}
		}
		c.last = now
	}
	for l := range st {
		st[l].DesiredWorkers = c.est[l]
	}
	return st
}

// laneMeter is one registration's histograms, by level.
type laneMeter struct{ wait, latency []func(float64) }

// instrumentLanes publishes the lanes' numbers by level (a priority label
// of at most MaxLevels values).
func (a *Async[In, Out]) instrumentLanes(l stream.Label, m stream.Meter) laneMeter {
	n := len(a.o.lanes.counters.levels)
	lm := laneMeter{wait: make([]func(float64), n), latency: make([]func(float64), n)}
	for lv := range n {
		pl := stream.Label{Name: "priority", Value: strconv.Itoa(lv)}
		lm.wait[lv] = m.Histogram("sluice_lane_wait_seconds",
			"Time a message waited before its first call started, from its arrival in the stage or its broker's append time (the wait aging counts), by level.",
			expBuckets(0.001, 2, 18), l, pl)
		lm.latency[lv] = m.Histogram("sluice_lane_latency_seconds",
			"Time from a message's arrival in the stage (or its broker's append time) to its outcome leaving the stage, by level.",
			expBuckets(0.001, 2, 18), l, pl)
	}
	m.Collect(func(w stream.MetricWriter) {
		for lv, s := range a.Stats().Levels {
			pl := stream.Label{Name: "priority", Value: strconv.Itoa(lv)}
			w.Gauge("sluice_lane_waiting", "Messages of a level queued for a call slot.", float64(s.Waiting), l, pl)
			w.Gauge("sluice_lane_in_flight", "Calls of a level running.", float64(s.InFlight), l, pl)
			w.Counter("sluice_lane_started_total", "Messages of a level whose first call started.", float64(s.Started), l, pl)
			w.Counter("sluice_lane_completed_total", "Messages of a level whose outcome left the stage.", float64(s.Done), l, pl)
			w.Counter("sluice_lane_busy_seconds_total", "Time the calls of a level ran, summed over calls.", s.Busy.Seconds(), l, pl)
			w.Gauge("sluice_lane_desired_workers", "Parallelism a level needs to keep up and drain its backlog within the drain time (LaneScaling).",
				float64(s.DesiredWorkers), l, pl)
		}
	})
	return lm
}

package ownsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// Scenarios are the scenarios Run knows, in the order they are usually
// run.
var Scenarios = []string{"cold_start", "scale_out", "scale_in", "crash", "rolling_restart", "store_outage", "slow_renewals", "settled"}

// Config is a run's group, timing and store.
type Config struct {
	// Members and Partitions size the group (default 500 x 4096).
	Members, Partitions int
	// Interval is the balancers' renewal interval (default 10 s),
	// Expiration the leases' (default 30 s).
	Interval, Expiration time.Duration
	// CommitInterval is how often each member writes its checkpoints
	// (default Interval/10: 1 s, sink/checkpoint's, at the usual 10 s).
	CommitInterval time.Duration
	// Latency is the round trip of every store call in simulated time
	// (default 1 ms; negative: none). A real store has its own.
	Latency  time.Duration
	Strategy ownership.Strategy
	// Seed (a number) picks the members that leave, crash or are slow, the slow
	// calls' latencies, and the balancers' random choices.
	Seed uint64
	// Spacing is the time between two instances' restarts in
	// rolling_restart (default Interval/5).
	Spacing time.Duration
	// Settle is how long the shares must stay fair with nothing moving
	// for a run to end (default 5 intervals); Limit the longest a run
	// waits for that after its disturbance (default 200 intervals).
	Settle, Limit time.Duration
	// Quiet is how long settled leaves the fair group alone (default 60
	// intervals).
	Quiet time.Duration
	// Store, if set, returns a fresh store (a namespace of its own) for
	// each run, and the run is in real time on the system clock; nil: an
	// in-memory store in simulated time.
	Store func(ctx context.Context, run string, expiration time.Duration) (ownership.Store, error)
	// Logger receives the balancers' logs (default: discarded).
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Members == 0 {
		c.Members = 500
	}
	if c.Partitions == 0 {
		c.Partitions = 4096
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Expiration == 0 {
		c.Expiration = 3 * c.Interval
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = c.Interval / 10
	}
	if c.Latency == 0 {
		c.Latency = time.Millisecond
	}
	if c.Spacing == 0 {
		c.Spacing = c.Interval / 5
	}
	if c.Settle == 0 {
		c.Settle = 5 * c.Interval
	}
	if c.Limit == 0 {
		c.Limit = 200 * c.Interval
	}
	if c.Quiet == 0 {
		c.Quiet = 60 * c.Interval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is what a run measured, from its disturbance (see Run) to its
// end.
type Result struct {
	Scenario            string
	Members, Partitions int
	Interval            time.Duration
	Real                bool // real time (a real store), not simulated
	// Overlaps counts starts of a partition on a member while another
	// member ran it; OverlapSeconds sums the time partitions ran on two
	// members at once.
	Overlaps       int
	OverlapSeconds float64
	// Fair reports whether the shares became fair (every partition
	// running, live members' counts within one) and stayed so;
	// SecondsToFair is when they last became so after the disturbance,
	// RoundsToFair the same in intervals.
	Fair                        bool
	SecondsToFair, RoundsToFair float64
	// Moved counts starts of a partition on a member other than the one
	// that ran it last; MinMoves is the fewest any fair layout needs from
	// the layout before the disturbance; ExcessMoves the difference.
	Moved, MinMoves, ExcessMoves int
	// Steals and SelfFences sum the balancers' counters; ClaimsLost counts
	// partitions asked in claims and not won (another claimed first).
	Steals, SelfFences, ClaimsLost int64
	// Load is the store's work over Seconds (the disturbance to the end).
	Load    Load
	Seconds float64
	// EndMembers is the number of members at the end.
	EndMembers int
	// Elapsed is the run's duration in real time; Steps the simulator's
	// actor switches.
	Elapsed time.Duration
	Steps   int64
}

// OpsPerSecond returns the store calls per second, PerMember per member.
func (r Result) OpsPerSecond() float64 { return float64(r.Load.Total()) / r.Seconds }

// RowsPerSecond returns the records read per second.
func (r Result) RowsPerSecond() float64 { return float64(r.Load.Rows) / r.Seconds }

// PerMember divides a group figure by the members at the end.
func (r Result) PerMember(x float64) float64 { return x / float64(r.EndMembers) }

// Run runs scenario on a group of cfg.Members: a fair group first (every
// member started at once, until the shares are fair and quiet), then the
// disturbance, then until the shares are fair and quiet again (or the
// limit). The disturbances: cold_start (the group's start is the
// disturbance), scale_out (10% more members at once), scale_in (10%
// stopped gracefully at once), crash (10% crashed at once),
// rolling_restart (every member stopped and started again, one at a time,
// Spacing apart: its figures include the whole roll), store_outage (every
// call fails for Expiration + 2 intervals: figures from the store's
// return), slow_renewals (a cold start where 10% of the members' store
// calls take 0.1-0.3 intervals: 1-3 s at the usual 10 s), settled (no
// disturbance: a fair group left alone for Quiet, the store's steady
// load).
func Run(ctx context.Context, cfg Config, scenario string) (Result, error) {
	cfg.defaults()
	if !slices.Contains(Scenarios, scenario) {
		return Result{}, fmt.Errorf("unknown scenario %q (known: %v)", scenario, Scenarios)
	}
	if cfg.Members < 1 || cfg.Partitions < 1 {
		return Result{}, errors.New("members and partitions must be at least 1")
	}
	rnd := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	g := &group{cfg: cfg, rec: newRecorder(cfg.Partitions), members: map[string]*member{}, log: cfg.Logger}
	for p := range cfg.Partitions {
		g.parts = append(g.parts, int32(p))
	}
	var inner ownership.Store
	var sim *Sim
	if cfg.Store == nil {
		sim = NewSim(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(cfg.Seed%1e6) * time.Millisecond))
		g.clock, g.bclock = sim, sim
		inner = NewMemStore(cfg.Expiration, sim.Now)
	} else {
		g.clock = Real{}
		s, err := cfg.Store(ctx, fmt.Sprintf("%s-%d", scenario, time.Now().UnixNano()), cfg.Expiration)
		if err != nil {
			return Result{}, err
		}
		inner = s
	}
	g.store = NewCounted(inner, g.clock, rand.New(rand.NewPCG(cfg.Seed, 0x51)))
	if sim != nil && cfg.Latency > 0 {
		g.store.SetLatency(cfg.Latency)
	}
	began := time.Now()
	var res Result
	var err error
	play := func() {
		res, err = g.play(scenario, rnd)
		g.stopAll()
	}
	if sim != nil {
		sim.Run(play)
		res.Steps = sim.Steps()
	} else {
		play()
	}
	res.Elapsed = time.Since(began)
	res.Real = sim == nil
	return res, err
}

// base is what was counted at the disturbance.
type base struct {
	at                  time.Time
	rec                 snapshot
	load                Load
	steals, fences, won int64
	minMoves            int
}

func (g *group) mark(rec snapshot, survivors []string) base {
	b := base{at: g.clock.Now(), rec: rec, load: g.store.Total()}
	b.steals, b.fences, b.won = g.balancerTotals()
	b.minMoves = minMoves(rec.prev, survivors, len(g.parts))
	return b
}

func (g *group) play(scenario string, rnd *rand.Rand) (Result, error) {
	cfg := g.cfg
	n := cfg.Members
	tenth := max(1, n/10)
	pick := func(k int) []string { // k live members, picked by cfg.Seed
		ids := g.live()
		rnd.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ids = ids[:k]
		sort.Strings(ids)
		return ids
	}
	startAll := func(from, to int) error {
		for i := from; i < to; i++ {
			if err := g.start(memberID(i)); err != nil {
				return err
			}
		}
		return nil
	}
	var b base
	if scenario == "cold_start" || scenario == "slow_renewals" {
		if scenario == "slow_renewals" {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = memberID(i)
			}
			rnd.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			for _, id := range ids[:tenth] {
				g.store.SetSlow(id, cfg.Interval/10, 3*cfg.Interval/10) // 1-3 s at the usual 10 s
			}
		}
		var all []string
		for i := range n {
			all = append(all, memberID(i))
		}
		b = g.mark(g.rec.snapshot(g.clock.Now()), all)
		if err := startAll(0, n); err != nil {
			return Result{}, err
		}
	} else {
		if err := startAll(0, n); err != nil {
			return Result{}, err
		}
		if !g.settle(g.clock.Now()) {
			return Result{}, fmt.Errorf("%s: the group did not become fair before the disturbance (limit %v)", scenario, cfg.Limit)
		}
		rec := g.rec.snapshot(g.clock.Now())
		switch scenario {
		case "scale_out":
			var after []string
			after = append(after, g.live()...)
			for i := n; i < n+tenth; i++ {
				after = append(after, memberID(i))
			}
			b = g.mark(rec, after)
			if err := startAll(n, n+tenth); err != nil {
				return Result{}, err
			}
		case "scale_in", "crash":
			gone := pick(tenth)
			var after []string
			for _, id := range g.live() {
				if !slices.Contains(gone, id) {
					after = append(after, id)
				}
			}
			b = g.mark(rec, after)
			for _, id := range gone {
				if scenario == "crash" {
					g.clock.Go(func() { g.crash(id) })
				} else {
					g.clock.Go(func() { g.stop(id) })
				}
			}
		case "rolling_restart":
			b = g.mark(rec, g.live())
			for _, id := range g.live() {
				g.stop(id)
				if err := g.start(id); err != nil {
					return Result{}, err
				}
				g.clock.Sleep(cfg.Spacing)
			}
		case "settled":
			b = g.mark(rec, g.live())
			g.clock.Sleep(cfg.Quiet)
		case "store_outage":
			g.store.SetDown(true)
			g.clock.Sleep(cfg.Expiration + 2*cfg.Interval)
			g.store.SetDown(false)
			b = g.mark(rec, g.live())
		}
	}
	fair := g.settle(b.at)
	return g.result(scenario, b, fair), nil
}

func (g *group) result(scenario string, b base, fair bool) Result {
	now := g.clock.Now()
	s := g.rec.snapshot(now)
	r := Result{Scenario: scenario, Members: g.cfg.Members, Partitions: g.cfg.Partitions, Interval: g.cfg.Interval,
		Overlaps: s.overlaps - b.rec.overlaps, OverlapSeconds: (s.overlap - b.rec.overlap).Seconds(),
		Fair: fair, Moved: s.moved - b.rec.moved, MinMoves: b.minMoves, EndMembers: len(g.live()),
		Load: g.store.Total().Sub(b.load), Seconds: now.Sub(b.at).Seconds()}
	if fair {
		r.SecondsToFair = max(0, s.fairAt.Sub(b.at).Seconds())
		r.RoundsToFair = r.SecondsToFair / g.cfg.Interval.Seconds()
	}
	r.ExcessMoves = r.Moved - r.MinMoves
	steals, fences, won := g.balancerTotals()
	r.Steals, r.SelfFences = steals-b.steals, fences-b.fences
	r.ClaimsLost = r.Load.RowsOf[Claim] - (won - b.won)
	return r
}

// minMoves returns the fewest partitions that must start on another
// member than the one that last ran them for the shares among members to
// be fair: each member keeps as many of its partitions as its share
// allows (n/m, or n/m + 1 for n%m of them, given to those that hold
// most), and every partition of a member no longer there moves.
func minMoves(prev []string, members []string, n int) int {
	if len(members) == 0 {
		return 0
	}
	count := map[string]int{}
	had := 0
	for _, id := range prev {
		if id != "" {
			had++
			count[id]++
		}
	}
	var cs []int
	for _, id := range members {
		cs = append(cs, count[id])
	}
	sort.Sort(sort.Reverse(sort.IntSlice(cs)))
	base, extra := n/len(members), n%len(members)
	kept := 0
	for i, c := range cs {
		limit := base
		if i < extra {
			limit++
		}
		kept += min(c, limit)
	}
	return had - kept
}

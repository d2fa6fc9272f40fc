package ownsim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/source/ownership"
)

// group is the members of one run over one store.
type group struct {
	cfg     Config
	clock   Clock
	bclock  ownership.Clock // the balancers' (nil: the system's)
	store   *Counted
	rec     *recorder
	parts   []int32
	mu      sync.Mutex // members, ids and all: in real time, members stop on goroutines of their own
	members map[string]*member
	ids     []string  // live members, in the order they started
	all     []*member // every member ever started (restarts included)
	log     *slog.Logger
}

type member struct {
	id     string
	bal    *ownership.Balancer[struct{}]
	cancel context.CancelFunc // the pipeline's
	done   Signal             // fired with cancel: ends Run and the commits
}

// end ends m's pipeline.
func (m *member) end() {
	m.cancel()
	m.done.Fire()
}

func memberID(i int) string { return fmt.Sprintf("m%04d", i) }

// start starts member id: a balancer over a source of its own, run as a
// pipeline would (Run), with a checkpoint committed every commit
// interval, as sink/checkpoint does.
func (g *group) start(id string) error {
	done := g.clock.NewSignal()
	src := newSource(id, g.parts, g.clock, g.rec, done)
	bal, err := ownership.NewBalancer[struct{}](g.store.For(id), src, ownership.Config{ID: id, Interval: g.cfg.Interval,
		Strategy: g.cfg.Strategy, Clock: g.bclock, Logger: g.log})
	if err != nil {
		return err
	}
	g.store.Revive(id)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{id: id, bal: bal, cancel: cancel, done: done}
	g.mu.Lock()
	g.members[id] = m
	g.ids = append(g.ids, id)
	g.all = append(g.all, m)
	g.mu.Unlock()
	g.rec.join(id, g.clock.Now())
	g.clock.Go(func() { _ = bal.Run(ctx, nil) })
	g.clock.Go(func() {
		for done.Wait(g.cfg.CommitInterval) {
			_ = bal.Commit(ctx)
		}
	})
	return nil
}

func (g *group) forget(id string) *member {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[id]
	delete(g.members, id)
	for i, x := range g.ids {
		if x == id {
			g.ids = append(g.ids[:i:i], g.ids[i+1:]...)
			break
		}
	}
	return m
}

// live returns the live members' ids, in the order they started.
func (g *group) live() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ids)
}

// stop stops member id as a user's shutdown does: the pipeline ends, then
// Close (a final checkpoint, the partitions relinquished). It returns
// once Close has.
func (g *group) stop(id string) {
	m := g.forget(id)
	g.rec.leave(id, g.clock.Now())
	m.end()
	ctx, cancel := g.clock.WithTimeout(context.Background(), g.cfg.Interval)
	defer cancel()
	_ = m.bal.Close(ctx)
}

// crash kills member id: it processes nothing from now on, and none of
// its calls reaches the store (its balancer is closed to end its loop,
// and writes nothing).
func (g *group) crash(id string) {
	m := g.forget(id)
	g.store.Crash(id)
	g.rec.crash(id, g.clock.Now())
	m.end()
	_ = m.bal.Close(context.Background())
}

// stopAll closes every member, so that a simulated run ends.
func (g *group) stopAll() {
	for ids := g.live(); len(ids) > 0; ids = g.live() {
		g.stop(ids[len(ids)-1])
	}
}

// balancerTotals sums the counters of every balancer ever started.
func (g *group) balancerTotals() (steals, fences, won int64) {
	g.mu.Lock()
	all := slices.Clone(g.all)
	g.mu.Unlock()
	for _, m := range all {
		st := m.bal.Stats()
		steals += st.Stolen
		fences += st.SelfFences
		won += st.Claimed + st.Stolen + st.Reclaimed
	}
	return steals, fences, won
}

// settle waits until the shares are fair and nothing started or stopped
// for cfg.Settle, or until limit after t0. It reports whether they are.
func (g *group) settle(t0 time.Time) bool {
	for {
		g.clock.Sleep(g.cfg.Interval / 2)
		now := g.clock.Now()
		s := g.rec.snapshot(now)
		if s.fair && now.Sub(s.changed) >= g.cfg.Settle && now.Sub(s.fairAt) >= g.cfg.Settle {
			return true
		}
		if now.Sub(t0) > g.cfg.Limit {
			return false
		}
	}
}

package backpressure

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Adaptive is a concurrency Limiter that holds the tail latency of the
// calls it admits near a target: AIMD on a windowed p99, with a slow start.
//
// Every Window samples (default 128) it computes the p99 latency of the
// window and adjusts the limit once:
//   - p99 above the target: multiply the limit by target/p99, clamped to
//     [0.5, 0.95] — a cut proportional to the overshoot;
//   - a call dropped (timed out, rejected as overloaded): multiply by Backoff
//     (default 0.9), whatever the latency;
//   - otherwise, if the limit was reached during the window (it is what
//     holds the stage back): double it until the first cut (slow start),
//     then add sqrt(limit).
//
// The target is either configured or, if zero, twice the lowest window
// median seen so far (the service's unloaded latency, TCP Vegas' base RTT).
//
// Why this algorithm: the delivery workload sets a latency budget (p99 < 500 ms end to
// end), so the natural control variable is a latency target rather than an
// estimated queue length (Vegas) or a ratio of short and long RTT averages
// (Netflix's Gradient2, which failsafe-go's adaptive limiter follows): a p99
// over a window reacts to the tail that the budget is about, where averages
// hide it. Additive increase probes for capacity; a multiplicative cut sheds
// a forming queue quickly (the AIMD stability argument); making the cut
// proportional to the overshoot keeps the limit from oscillating around the
// target; slow start reaches a service's capacity in a few windows instead
// of hundreds; raising only when the limit was reached keeps it from
// drifting upward while the stage is idle.
type Adaptive struct {
	cfg AdaptiveConfig

	limit atomic.Int64

	mu        sync.Mutex
	lim       float64
	window    []time.Duration
	saturated bool
	dropped   bool
	baseline  time.Duration // lowest window p50 seen
	cut       bool          // slow start ends at the first cut
	lastP99   time.Duration
	increases int64
	decreases int64
}

// AdaptiveConfig configures an Adaptive limiter. Zero fields take the
// defaults given.
type AdaptiveConfig struct {
	// Target is the p99 latency to hold (default: 2x the lowest window
	// median seen).
	Target time.Duration
	// Initial, Min and Max bound the limit (defaults 16, 1, 1000).
	Initial, Min, Max int
	// Window is the number of samples per decision (default 128: with
	// fewer, one slow call in a window decides its p99 too often).
	Window int
	// Backoff multiplies the limit after a dropped call (default 0.9).
	Backoff float64
}

// NewAdaptive returns an adaptive limiter.
func NewAdaptive(cfg AdaptiveConfig) (*Adaptive, error) {
	if cfg.Initial == 0 {
		cfg.Initial = 16
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = 1000
	}
	if cfg.Window == 0 {
		cfg.Window = 128
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 0.9
	}
	switch {
	case cfg.Target < 0:
		return nil, configError("adaptive limiter", "Target", "must not be negative, got %v", cfg.Target)
	case cfg.Min < 1 || cfg.Max < cfg.Min:
		return nil, configError("adaptive limiter", "Min", "need 1 <= Min <= Max, got Min %d Max %d", cfg.Min, cfg.Max)
	case cfg.Initial < cfg.Min || cfg.Initial > cfg.Max:
		return nil, configError("adaptive limiter", "Initial", "%d is outside [Min %d, Max %d]", cfg.Initial, cfg.Min, cfg.Max)
	case cfg.Window < 1:
		return nil, configError("adaptive limiter", "Window", "must be at least 1, got %d", cfg.Window)
	case cfg.Backoff <= 0 || cfg.Backoff >= 1:
		return nil, configError("adaptive limiter", "Backoff", "must be in (0, 1), got %v", cfg.Backoff)
	}
	a := &Adaptive{cfg: cfg, lim: float64(cfg.Initial), window: make([]time.Duration, 0, cfg.Window)}
	a.limit.Store(int64(cfg.Initial))
	return a, nil
}

// Limit returns the current limit.
func (a *Adaptive) Limit() int { return int(a.limit.Load()) }

// Observe records a finished call and adjusts the limit once a window is
// full.
func (a *Adaptive) Observe(s Sample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.window = append(a.window, s.Latency)
	if s.InFlight >= int(a.lim) {
		a.saturated = true
	}
	if s.Dropped {
		a.dropped = true
	}
	if len(a.window) < a.cfg.Window {
		return
	}
	slices.Sort(a.window)
	p50 := a.window[len(a.window)/2]
	p99 := a.window[min(len(a.window)-1, int(math.Ceil(0.99*float64(len(a.window))))-1)]
	a.lastP99 = p99
	if a.baseline == 0 || p50 < a.baseline {
		a.baseline = p50
	}
	target := a.cfg.Target
	if target == 0 {
		target = 2 * a.baseline
	}
	switch {
	case a.dropped || p99 > target:
		f := a.cfg.Backoff
		if !a.dropped {
			f = min(0.95, max(0.5, float64(target)/float64(p99)))
		}
		a.lim = max(float64(a.cfg.Min), a.lim*f)
		a.cut = true
		a.decreases++
	case a.saturated:
		if a.cut {
			a.lim += max(1, math.Sqrt(a.lim))
		} else {
			a.lim *= 2
		}
		a.lim = min(float64(a.cfg.Max), a.lim)
		a.increases++
	}
	a.limit.Store(int64(a.lim))
	a.window = a.window[:0]
	a.saturated, a.dropped = false, false
}

// AdaptiveStats is a snapshot of an Adaptive limiter.
type AdaptiveStats struct {
	Limit                int
	LastP99, Baseline    time.Duration
	Increases, Decreases int64
}

// Stats returns a snapshot of the limiter's state.
func (a *Adaptive) Stats() AdaptiveStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AdaptiveStats{Limit: int(a.lim), LastP99: a.lastP99, Baseline: a.baseline,
		Increases: a.increases, Decreases: a.decreases}
}

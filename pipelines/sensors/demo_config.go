package sensors

import (
	"fmt"
	"log/slog"
	"time"
)

// DemoConfig shapes a demo run: the whole workload in one process, on an
// embedded broker (kfake) and an embedded Redis (miniredis).
type DemoConfig struct {
	// Homes (default DefaultDemoHomes) and Kinds (default 3) shape the
	// load; Compression is simulated time per real time (default 60: a
	// simulated minute per second). Every simulated minute writes one
	// aggregate per home, each a run of the write script.
	Homes, Kinds int
	Compression  float64
	// AddKindAfter adds the next kind to every home after this much of
	// the run (default: midway through Duration; negative: never).
	AddKindAfter time.Duration
	// Malformed, Late and OutOfRange are the generator's shares (zero:
	// its defaults).
	Malformed, Late, OutOfRange float64
	// Duration is how long the load is sent (default 40 s): the whole
	// simulated minutes of Duration × Compression.
	Duration time.Duration
	// Partitions of the readings topic (default 16).
	Partitions int32
	// Instances started at first (default 3). The load starts once they
	// hold every partition between them. A third of the way through the
	// load the second one stops (gracefully) and two thirds of the way a
	// new one joins.
	Instances int
	// Interval and Expiration are the ownership renewal interval and the
	// lease (default 500 ms and 3 s: a member claims a partition per
	// round at start, so a short interval makes the start quick).
	Interval, Expiration time.Duration
	// IdleClose writes a partition's open minutes when it received
	// nothing for this long (default 2 s: the load is compressed).
	IdleClose time.Duration
	// Every is the status line's interval (default 1 s; negative: none).
	Every time.Duration
	// Drain bounds the wait, once the load is sent, for every partition's
	// checkpoint to reach the end of its log (default 60 s).
	Drain time.Duration
	// Listen, if set, serves the residents' page (/homes) and the live
	// page of the running instances' pipelines (/status) there.
	Listen string
	// Logger receives the workers' logs (default: discarded).
	Logger *slog.Logger
}

// DefaultDemoHomes is the demo's default number of homes: at a simulated
// minute per second, 2,000 runs of the write script a second, which the
// embedded Redis keeps up with on two cores shared with everything else of
// the demo. (It runs each script in a Lua interpreter of its own, about
// 150 µs of CPU; at 3,000 homes its backlog grew on a busy machine.)
const DefaultDemoHomes = 2_000

func (c *DemoConfig) defaults() {
	if c.Homes == 0 {
		c.Homes = DefaultDemoHomes
	}
	if c.Kinds == 0 {
		c.Kinds = 3
	}
	if c.Compression == 0 {
		c.Compression = 60
	}
	if c.Duration == 0 {
		c.Duration = 40 * time.Second
	}
	if c.AddKindAfter == 0 {
		c.AddKindAfter = c.Duration / 2
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.Instances == 0 {
		c.Instances = 3
	}
	if c.Interval == 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.Expiration == 0 {
		c.Expiration = 6 * c.Interval
	}
	if c.IdleClose == 0 {
		c.IdleClose = 2 * time.Second
	}
	if c.Every == 0 {
		c.Every = time.Second
	}
	if c.Drain == 0 {
		c.Drain = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate names what is wrong with c (after defaults).
func (c DemoConfig) Validate() error {
	c.defaults()
	switch {
	case c.Duration < 0:
		return fmt.Errorf("sensors: demo duration %v: want > 0", c.Duration)
	case c.Partitions < 1:
		return fmt.Errorf("sensors: demo partitions %d: want at least 1", c.Partitions)
	case c.Instances < 2:
		return fmt.Errorf("sensors: demo instances %d: want at least 2 (one of them stops)", c.Instances)
	case c.Interval < 0:
		return fmt.Errorf("sensors: demo interval %v: want > 0", c.Interval)
	case c.Expiration <= c.Interval:
		return fmt.Errorf("sensors: demo expiration %v: want more than the interval %v", c.Expiration, c.Interval)
	case c.IdleClose < 0 || c.Drain < 0:
		return fmt.Errorf("sensors: demo idle close %v, drain %v: want > 0", c.IdleClose, c.Drain)
	}
	if c.simMinutes() < 1 {
		return fmt.Errorf("sensors: demo duration %v at compression %v is less than a simulated minute", c.Duration, c.Compression)
	}
	return c.genConfig(time.Now()).Validate()
}

// simMinutes is the whole simulated minutes the load lasts.
func (c DemoConfig) simMinutes() int {
	return int(c.Duration.Seconds() * c.Compression / 60)
}

func (c DemoConfig) genConfig(now time.Time) GenConfig {
	// The simulated time ends before now, and an hour back at least,
	// so that the page's last hour shows the whole run.
	span := time.Duration(c.simMinutes()) * time.Minute
	gc := GenConfig{Homes: c.Homes, Kinds: c.Kinds, Compression: c.Compression, Malformed: c.Malformed, Late: c.Late,
		OutOfRange: c.OutOfRange, Start: now.Add(-max(time.Hour, span+time.Minute)).Truncate(time.Minute)}
	if c.AddKindAfter > 0 {
		gc.AddKindAfter = c.AddKindAfter
	}
	return gc
}

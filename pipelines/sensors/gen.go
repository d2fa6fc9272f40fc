package sensors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// GenConfig describes the load of the sensors workload.
type GenConfig struct {
	// Topic to produce to (default DefaultTopic).
	Topic string
	// Homes (default 100,000) each have one sensor of each of the first
	// Kinds kinds (default 3: motion, door, glass); each sensor sends one
	// reading per simulated minute, at a second of the minute of its own.
	Homes, Kinds int
	// AddKindAfter, if set, adds the next kind (carbon monoxide) to every
	// home after this much real time: the rate rises by a third.
	AddKindAfter time.Duration
	// Compression is simulated time per real time (default 60: a
	// simulated minute per second) until simulated time reaches the real
	// clock; from then on it runs at the real rate.
	Compression float64
	// Start is the simulated time of the run's start (default the real
	// time's minute an hour ago, so that record timestamps stay behind the
	// broker's clock).
	Start time.Time
	// Malformed and Late are the shares of readings sent malformed (an
	// unknown kind, a bad number, a missing field or home id, a clock never
	// set) and late (an event time 5 simulated minutes before its
	// sending); OutOfRange the share with a value the kind cannot report;
	// defaults 0.001, 0.001, 0.0005. Every home also sends a heartbeat
	// every 5 minutes.
	Malformed, Late, OutOfRange float64
	// Seed makes a run repeatable (default 1).
	Seed uint64
}

func (c *GenConfig) defaults() {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Homes == 0 {
		c.Homes = 100_000
	}
	if c.Kinds == 0 {
		c.Kinds = 3
	}
	if c.Compression == 0 {
		c.Compression = 60
	}
	if c.Start.IsZero() {
		c.Start = time.Now().Add(-time.Hour).Truncate(time.Minute)
	}
	if c.Malformed == 0 {
		c.Malformed = 0.001
	}
	if c.Late == 0 {
		c.Late = 0.001
	}
	if c.OutOfRange == 0 {
		c.OutOfRange = 0.0005
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// Validate names what is wrong with c (after defaults).
func (c GenConfig) Validate() error {
	c.defaults()
	switch {
	case c.Homes < 1:
		return fmt.Errorf("sensors: homes %d: want at least 1", c.Homes)
	case c.Kinds < 1 || c.Kinds > NumKinds:
		return fmt.Errorf("sensors: kinds %d: want 1 to %d", c.Kinds, NumKinds)
	case c.Compression <= 0:
		return fmt.Errorf("sensors: compression %v: want > 0", c.Compression)
	case c.Malformed < 0 || c.Late < 0 || c.OutOfRange < 0 || c.Malformed+c.Late+c.OutOfRange > 0.5:
		return fmt.Errorf("sensors: shares malformed %v, late %v, out-of-range %v: want each >= 0 and together <= 0.5",
			c.Malformed, c.Late, c.OutOfRange)
	}
	return nil
}

// HomeID is the id of home i.
func HomeID(i int) string { return fmt.Sprintf("h%06d", i) }

// Generator produces the workload and records what it sent.
type Generator struct {
	cfg      GenConfig
	Expected *Expected
	sent     atomic.Int64
	kinds    atomic.Int32
	simNow   atomic.Int64 // Unix ms
	failed   atomic.Int64
	firstErr atomic.Pointer[error]
}

// NewGenerator returns a generator; Expected records what it sends.
func NewGenerator(cfg GenConfig) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	g := &Generator{cfg: cfg, Expected: newExpected()}
	g.kinds.Store(int32(cfg.Kinds))
	g.simNow.Store(cfg.Start.UnixMilli())
	return g, nil
}

// Sent returns how many records were handed to the producer.
func (g *Generator) Sent() int64 { return g.sent.Load() }

// Kinds returns the number of kinds sending now.
func (g *Generator) Kinds() int { return int(g.kinds.Load()) }

// SimNow returns the simulated time reached.
func (g *Generator) SimNow() time.Time { return time.UnixMilli(g.simNow.Load()) }

// offset is the second (in ms) of each minute at which a home's sensor of
// a kind sends, spread by hashing.
func offset(home, kind int) int64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", home, kind)
	return int64(h.Sum32() % 60_000)
}

// Run produces until ctx ends or, if minutes > 0, that many simulated
// minutes were sent; it waits for every record to be acknowledged.
func (g *Generator) Run(ctx context.Context, cl *kgo.Client, minutes int) error {
	cfg := g.cfg
	// slots[s] lists the (home, kind) pairs that send in second s of a
	// minute, the heartbeats apart.
	type pair struct {
		home, kind int32
		offset     int64
	}
	var slots [60][]pair
	for h := range cfg.Homes {
		for k := range NumKinds {
			o := offset(h, k)
			slots[o/1000] = append(slots[o/1000], pair{int32(h), int32(k), o})
		}
	}
	rnd := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	start := time.Now()
	sim := cfg.Start.UnixMilli() // simulated ms sent up to (exclusive)
	end := int64(-1)
	if minutes > 0 {
		end = sim + int64(minutes)*60_000
	}
	var wg sync.WaitGroup
	produce := func(r *kgo.Record) {
		wg.Add(1)
		g.sent.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && g.failed.Add(1) == 1 {
				g.firstErr.Store(&err)
			}
			wg.Done()
		})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	defer wg.Wait()
	for {
		if cfg.AddKindAfter > 0 && time.Since(start) >= cfg.AddKindAfter && int(g.kinds.Load()) < NumKinds {
			g.kinds.Add(1)
		}
		now := cfg.Start.UnixMilli() + int64(float64(time.Since(start).Milliseconds())*cfg.Compression)
		// Simulated time never passes the clock: once it catches up it runs
		// at the real rate, the seed's load. Readings stamped ahead of the
		// clock are dead-lettered by the workers (MaxClockAhead), and a
		// broker may refuse them.
		now = min(now, time.Now().UnixMilli())
		if end >= 0 && now > end {
			now = end
		}
		kinds := int32(g.kinds.Load())
		// Every whole simulated second in [sim, now) sends its slot. Its
		// records' timestamp (their arrival, for the pipeline) is the
		// second's end, or now if sooner: within a second of their event
		// time however far this loop fell behind the simulated clock (a GC
		// pause, a busy machine, a broker holding the producer back), or
		// readings the recount takes as on time would arrive late.
		for sec := (sim + 999) / 1000 * 1000; sec < now; sec += 1000 {
			ts := time.UnixMilli(min(sec+1000, now))
			minute := sec / 60_000 * 60_000
			for _, p := range slots[(sec%60_000)/1000] {
				if p.kind >= kinds {
					continue
				}
				ev := minute + p.offset
				produce(g.reading(rnd, int(p.home), Kind(p.kind), ev, ts))
			}
			if sec%300_000 == 0 { // heartbeats every 5 minutes
				for h := range cfg.Homes {
					produce(&kgo.Record{Topic: cfg.Topic, Key: []byte(HomeID(h)), Timestamp: ts,
						Value: Format("hb", Heartbeat, time.UnixMilli(sec), 1)})
					g.Expected.heartbeat()
				}
			}
		}
		sim = max(sim, now)
		g.simNow.Store(sim)
		if p := g.firstErr.Load(); p != nil {
			return fmt.Errorf("sensors: producing: %w", *p)
		}
		if end >= 0 && sim >= end {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	wg.Wait()
	if p := g.firstErr.Load(); p != nil {
		return fmt.Errorf("sensors: producing: %w", *p)
	}
	return nil
}

// reading builds one reading, now and then a malformed, late or
// out-of-range one, and records it.
func (g *Generator) reading(rnd *rand.Rand, home int, kind Kind, ev int64, ts time.Time) *kgo.Record {
	cfg := g.cfg
	id := HomeID(home)
	sensor := fmt.Sprintf("s%d", kind+1)
	v := int64(0)
	switch kind {
	case Motion, Door:
		if rnd.IntN(4) == 0 {
			v = 1
		}
	case Glass:
		if rnd.IntN(500) == 0 {
			v = 1
		}
	case CO:
		v = int64(rnd.IntN(40))
		if rnd.IntN(200) == 0 {
			v = 40 + int64(rnd.IntN(100))
		}
	}
	r := &kgo.Record{Topic: cfg.Topic, Key: []byte(id), Timestamp: ts}
	x := rnd.Float64()
	switch {
	case x < cfg.Malformed:
		g.Expected.malformed()
		switch rnd.IntN(5) {
		case 0:
			r.Value = fmt.Appendf(nil, "%s,smoke,%d,%d", sensor, ev, v)
		case 1:
			r.Value = []byte(sensor + "," + kind.String() + ",soon," + fmt.Sprint(v))
		case 2:
			r.Value = []byte(sensor + "," + kind.String())
		case 3:
			r.Key, r.Value = nil, Format(sensor, kind, time.UnixMilli(ev), v)
		default:
			r.Value = Format(sensor, kind, time.UnixMilli(0), v)
		}
	case x < cfg.Malformed+cfg.Late:
		g.Expected.late()
		r.Value = Format(sensor, kind, time.UnixMilli(ev-5*60_000), v)
	case x < cfg.Malformed+cfg.Late+cfg.OutOfRange:
		g.Expected.outOfRange()
		r.Value = Format(sensor, kind, time.UnixMilli(ev), 7+int64(MaxCO)*int64(kind/CO))
	default:
		r.Value = Format(sensor, kind, time.UnixMilli(ev), v)
		g.Expected.add(int32(home), kind, sensor, ev, v)
	}
	return r
}

// Expected is the recount of what a generator sent: per home and minute,
// from the valid readings alone, counted here and not by the pipeline's
// code.
type Expected struct {
	mu                                         sync.Mutex
	minutes                                    map[homeMinute]*expMinute
	valid, malformedN, lateN, outOfRangeN, hbN int64
}

type homeMinute struct {
	home   int32
	minute int64 // Unix s
}

type expMinute struct {
	events, readings [NumKinds]uint32
	alarms           uint32
	last             int64
}

func newExpected() *Expected { return &Expected{minutes: map[homeMinute]*expMinute{}} }

func (e *Expected) add(home int32, kind Kind, sensor string, ev, v int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.valid++
	k := homeMinute{home, ev / 60_000 * 60}
	m := e.minutes[k]
	if m == nil {
		m = &expMinute{}
		e.minutes[k] = m
	}
	m.readings[kind]++
	// What the workload calls an event and an alarm (see the package doc).
	switch {
	case kind == CO && v >= 35:
		m.events[kind]++
	case kind != CO && v == 1:
		m.events[kind]++
	}
	if kind == Glass && v == 1 || kind == CO && v >= 70 {
		m.alarms++
	}
	m.last = max(m.last, ev)
}

func (e *Expected) malformed()  { e.mu.Lock(); e.malformedN++; e.mu.Unlock() }
func (e *Expected) late()       { e.mu.Lock(); e.lateN++; e.mu.Unlock() }
func (e *Expected) outOfRange() { e.mu.Lock(); e.outOfRangeN++; e.mu.Unlock() }
func (e *Expected) heartbeat()  { e.mu.Lock(); e.hbN++; e.mu.Unlock() }

// Counts returns how many valid, malformed, late, out-of-range and
// heartbeat readings were sent.
func (e *Expected) Counts() (valid, malformed, late, outOfRange, heartbeats int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.valid, e.malformedN, e.lateN, e.outOfRangeN, e.hbN
}

// ErrMismatch is wrapped by a verification that found a stored aggregate
// other than the recount.
var ErrMismatch = errors.New("sensors: stored aggregates differ from the recount of what was sent")

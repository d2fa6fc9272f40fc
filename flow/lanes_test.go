package flow_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// pause in a leveled source's list hands on what was sent and waits 100 ms
// before sending the rest.
const pause = 255

// leveled is a source of messages whose value is their level, in the
// order given, each tagged with its level.
func leveled(levels ...uint8) stream.Source[int] {
	ms := make([]stamp, len(levels))
	for i, l := range levels {
		ms[i].level = l
	}
	return stamped(ms...)
}

// stamp is a message of a stamped source: its level (or pause), and its
// Timestamp, the broker's append time if appended.
type stamp struct {
	level    uint8
	ts       time.Time
	appended bool
}

// stamped is leveled with timestamps.
func stamped(ms ...stamp) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for _, s := range ms {
			if s.level == pause {
				if err := out.Flush(ctx); err != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			m := stream.NewMessage(int(s.level), stream.Handle{})
			m.Priority, m.Timestamp, m.AppendTime = s.level, s.ts, s.appended
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// starts runs the messages through MapAsync(parallelism) with opts, each
// call taking one second of the bubble's fake time, and returns the level
// of each call in the order the calls started, with the fake time each
// started at. Every message is in the stage before the first second ends.
func starts(t *testing.T, msgs []uint8, parallelism int, opts ...flow.AsyncOption) (order []int, at []time.Duration) {
	return startsOf(t, func(time.Time) stream.Source[int] { return leveled(msgs...) }, parallelism, opts...)
}

// startsOf is starts with the source src(t0) returns, t0 being when the
// bubble's time starts.
func startsOf(t *testing.T, src func(t0 time.Time) stream.Source[int], parallelism int, opts ...flow.AsyncOption) (order []int, at []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		t0 := time.Now()
		fn := func(_ context.Context, v int) (int, error) {
			mu.Lock()
			order = append(order, v)
			at = append(at, time.Since(t0))
			mu.Unlock()
			time.Sleep(time.Second)
			return v, nil
		}
		g := stream.New()
		a := flow.MapAsync(parallelism, fn, append(opts, flow.Window(64))...)
		stream.To(stream.Via(stream.From(g, src(t0)), a), sink.Discard[int]())
		run(t, g)
	})
	return order, at
}

// Pre-emption before start: a freed slot goes to the highest level
// waiting, so high messages queued behind low ones start first; the call
// in flight is not cut.
func TestLanesServeHighFirst(t *testing.T) {
	msgs := []uint8{1, 1, 1, 1, pause, 0, 0, 0}
	order, _ := starts(t, msgs, 1, flow.Lanes(backpressure.StrictPriority(2)))
	want := []int{1, 0, 0, 0, 1, 1, 1} // the first low was running when the high ones came
	if !equal(order, want) {
		t.Fatalf("start order %v, want %v", order, want)
	}
	fifo, _ := starts(t, msgs, 1)
	if !equal(fifo, []int{1, 1, 1, 1, 0, 0, 0}) {
		t.Fatalf("without lanes: %v, want arrival order", fifo)
	}
}

// A reservation keeps a slot for low while it has work (a pool per
// priority), and a level with nothing waiting lends its reservation.
func TestLanesReserveAndLend(t *testing.T) {
	msgs := []uint8{0, 0, 0, 0, 0, 0, 1, 1, 1}
	order, at := starts(t, msgs, 2, flow.Lanes(backpressure.StrictPriority(2), 0, 1))
	var first []int
	for i, d := range at {
		if d == 0 {
			first = append(first, order[i])
		}
	}
	if len(first) != 2 || count(first, 1) != 1 {
		t.Fatalf("calls started at once: levels %v, want one high and the low kept one slot (%v)", first, order)
	}
	// Only low work, with high's reservation of 3: low takes all 4 slots.
	order, at = starts(t, []uint8{1, 1, 1, 1, 1, 1, 1, 1}, 4, flow.Lanes(backpressure.StrictPriority(2), 3, 1))
	n := 0
	for _, d := range at {
		if d == 0 {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d low calls started at once with high idle, want 4 (borrowed): %v %v", n, order, at)
	}
}

// 6:3:1 among the levels waiting, slot after slot.
func TestLanesWeighted(t *testing.T) {
	var msgs []uint8
	for range 20 {
		msgs = append(msgs, 2, 1, 0)
	}
	order, _ := starts(t, msgs, 1, flow.Lanes(backpressure.WeightedPriority(6, 3, 1)))
	var c [3]int
	for _, l := range order[1:11] {
		c[l]++
	}
	if c != [3]int{6, 3, 1} {
		t.Fatalf("10 starts after the first: %v, want [6 3 1] (%v)", c, order)
	}
}

func TestLanesOutOfRangeFailsTheMessage(t *testing.T) {
	g := stream.New()
	a := flow.MapAsync(2, func(_ context.Context, v int) (int, error) { return v, nil }, flow.Lanes(backpressure.StrictPriority(2)))
	stream.To(stream.Via(stream.From(g, leveled(0, 5, 1)), a), sink.Discard[int]())
	var errs []error
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		errs = append(errs, m.Value.Err)
		return nil
	}))
	run(t, g)
	if len(errs) != 1 || !errors.Is(errs[0], flow.ErrPriorityOutOfRange) {
		t.Fatalf("failures %v, want the level-5 message's, out of range", errs)
	}
}

func TestLanesConfigErrors(t *testing.T) {
	id := func(_ context.Context, v int) (int, error) { return v, nil }
	for name, a := range map[string]*flow.Async[int, int]{
		"reservations above parallelism": flow.MapAsync(2, id, flow.Lanes(backpressure.StrictPriority(2), 2, 1)),
		"one reservation for two levels": flow.MapAsync(2, id, flow.Lanes(backpressure.StrictPriority(2), 1)),
		"bad policy":                     flow.MapAsync(2, id, flow.Lanes(backpressure.WeightedPriority(1, 0))),
	} {
		var ce *stream.ConfigError
		if err := a.Validate(); !errors.As(err, &ce) || ce.Argument != "Lanes" {
			t.Errorf("%s: %v, want a ConfigError naming Lanes", name, err)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func count(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

// A message stamped at the Unix epoch (a Kafka record with CreateTime 0)
// is served like any other under an aging policy. (Found in review: it
// made the lanes pick level -1, a panic under the workers' lock, and Run
// never returned.)
func TestLanesEpochTimestamp(t *testing.T) {
	g := stream.New()
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		m := stream.NewMessage(1, stream.Handle{})
		m.Priority, m.Timestamp = 1, time.Unix(0, 0)
		return out.Send(ctx, m)
	})
	a := flow.MapAsync(1, func(_ context.Context, v int) (int, error) { return v, nil },
		flow.Lanes(backpressure.StrictPriority(2).Aging(0, time.Second)))
	c := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, src), a), c)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil || len(c.Values()) != 1 {
			t.Fatalf("Run = %v, collected %v; want the message through", err, c.Values())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s")
	}
}

// Stats by level: what waits and runs, what started and finished, the
// time calls ran, and the desired workers that keep up and drain the
// queue within the drain time.
func TestLaneStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := func(_ context.Context, v int) (int, error) {
			time.Sleep(time.Second)
			return v, nil
		}
		a := flow.MapAsync(2, fn, flow.Window(64), flow.Lanes(backpressure.StrictPriority(3)), flow.LaneScaling(2*time.Second, nil))
		g := stream.New()
		stream.To(stream.Via(stream.From(g, leveled(0, 0, 0, 0, 2, 2, 2, 2, 2, 2)), a), sink.Discard[int]())
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		at := func(d time.Duration) []flow.LaneStats {
			time.Sleep(d)
			synctest.Wait()
			return a.Stats().Levels
		}
		st := at(500 * time.Millisecond)
		if len(st) != 3 {
			t.Fatalf("%d levels, want 3", len(st))
		}
		if st[0].InFlight != 2 || st[0].Waiting != 2 || st[0].Started != 2 || st[2].Waiting != 6 || st[2].Started != 0 {
			t.Fatalf("at 0.5 s: %+v, want high 2 running 2 waiting, low 6 waiting", st)
		}
		// At 1.5 s: the first two high calls ran 1 s each in the last
		// second (2 slots busy) and no high waits: 2 workers. Low waited
		// but finished nothing: no estimate yet.
		st = at(time.Second)
		if st[0].Done != 2 || st[0].Busy != 2*time.Second || st[0].DesiredWorkers != 2 || st[2].DesiredWorkers != 0 {
			t.Fatalf("at 1.5 s: %+v, want high done 2, busy 2s, 2 desired", st)
		}
		// At 3.5 s: in the last second two low calls ran 1 s each (2
		// busy) and two low wait, which drain in 2 s with 1 more: 3.
		at(time.Second)
		st = at(time.Second)
		if st[2].Done != 2 || st[2].Waiting != 2 || st[2].InFlight != 2 || st[2].DesiredWorkers != 3 {
			t.Fatalf("at 3.5 s: %+v, want low done 2, 2 running, 2 waiting, 3 desired", st)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st = a.Stats().Levels
		if st[0].Done != 4 || st[2].Done != 6 || st[0].Busy != 4*time.Second || st[2].Busy != 6*time.Second || st[1].Started != 0 {
			t.Fatalf("at the end: %+v, want 4 high and 6 low done, busy 4 s and 6 s", st)
		}
		if st[0].Waiting != 0 || st[0].InFlight != 0 || st[2].InFlight != 0 {
			t.Fatalf("gauges after the run: %+v, want 0", st)
		}
	})
}

// LaneScaling needs Lanes and a drain time that is not negative.
func TestLaneScalingValidate(t *testing.T) {
	for _, opts := range [][]flow.AsyncOption{
		{flow.LaneScaling(time.Second, nil)},
		{flow.Lanes(backpressure.StrictPriority(2)), flow.LaneScaling(-time.Second, nil)},
	} {
		g := stream.New()
		stream.To(stream.Via(stream.From(g, leveled(0)), flow.MapAsync(1, func(_ context.Context, v int) (int, error) { return v, nil }, opts...)),
			sink.Discard[int]())
		var ce *stream.ConfigError
		if err := g.Run(context.Background()); !errors.As(err, &ce) || ce.Argument != "LaneScaling" {
			t.Errorf("Run: %v, want a ConfigError naming LaneScaling", err)
		}
	}
}

// fixedLimit is a limiter that holds the calls in flight to a number.
type fixedLimit int

func (l fixedLimit) Limit() int                { return int(l) }
func (fixedLimit) Observe(backpressure.Sample) {}

// A limiter below the reservations' sum (an adaptive limit lowered under
// load) scales them down rather than letting the first level take every
// slot: with 16/8/8 under a limit of 8, low keeps a slot of its own and
// starts while high still waits (48 messages: all in the window at once).
func TestLanesReservationsFitALowLimit(t *testing.T) {
	var msgs []uint8
	for range 40 {
		msgs = append(msgs, 0)
	}
	for range 8 {
		msgs = append(msgs, 2)
	}
	order, at := starts(t, msgs, 64, flow.Lanes(backpressure.StrictPriority(3), 16, 8, 8), flow.WithLimiter(fixedLimit(8)))
	first := slices.Index(order, 2)
	if first < 0 || first >= 40 {
		t.Fatalf("low's first call started at position %d of %d, after every high call: its reservation kept nothing", first, len(order))
	}
	if at[first] > time.Second {
		t.Fatalf("low's first call started at %v, want with the first calls", at[first])
	}
}

// A message whose Timestamp is its broker's append time (LogAppendTime)
// has waited since then: low appended 20 s ago has aged past its 10 s
// MaxWait and starts before the high ones that came with it.
func TestLanesAgeFromTheBrokersAppendTime(t *testing.T) {
	order, _ := startsOf(t, func(t0 time.Time) stream.Source[int] {
		return stamped(stamp{1, t0.Add(-20 * time.Second), true}, stamp{level: 0}, stamp{level: 0}, stamp{level: 0})
	}, 1, flow.Lanes(backpressure.StrictPriority(2).Aging(0, 10*time.Second)))
	if want := []int{1, 0, 0, 0}; !equal(order, want) {
		t.Fatalf("start order %v, want %v: low waited 20 s at the broker", order, want)
	}
}

// wrapped returns t plus 2^64 ns (rounded up to the second): a time past
// the year 2262 whose UnixNano wraps around to t (plus 0.29 s).
func wrapped(t time.Time) time.Time {
	const wrap = 18_446_744_074 // seconds: 2^64 ns is 18,446,744,073.7 s
	return time.Unix(t.Unix()+wrap, int64(t.Nanosecond()))
}

// A timestamp the producer chose (CreateTime) says nothing of how long a
// message has waited: a producer whose clock is behind, a backfill of old
// data, or a time past 2262 (which UnixNano wraps to one that looks old)
// must not start a fresh low message before high ones. Nor may a broker's
// append time that cannot be right: past 2262, or ahead of our clock.
func TestLanesTimestampsThatDoNotAge(t *testing.T) {
	for _, c := range []struct {
		name     string
		low      func(t0 time.Time) time.Time
		appended bool
	}{
		{"producer clock 20 s behind", func(t0 time.Time) time.Time { return t0.Add(-20 * time.Second) }, false},
		{"backfill of last year's data", func(t0 time.Time) time.Time { return t0.AddDate(-1, 0, 0) }, false},
		{"producer time past 2262", func(t0 time.Time) time.Time { return wrapped(t0.Add(-time.Hour)) }, false},
		{"broker time past 2262", func(t0 time.Time) time.Time { return wrapped(t0.Add(-time.Hour)) }, true},
		{"broker clock an hour ahead", func(t0 time.Time) time.Time { return t0.Add(time.Hour) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			order, _ := startsOf(t, func(t0 time.Time) stream.Source[int] {
				return stamped(stamp{1, c.low(t0), c.appended}, stamp{level: 0}, stamp{level: 0}, stamp{level: 0})
			}, 1, flow.Lanes(backpressure.StrictPriority(2).Aging(0, 10*time.Second)))
			if want := []int{0, 0, 0, 1}; !equal(order, want) {
				t.Fatalf("start order %v, want %v: the low message had just arrived", order, want)
			}
		})
	}
}

// A message whose timestamp does not count (none, or its producer's, here
// an hour ahead) waits from its arrival in the stage: low, come with the
// first high at 0, has waited 2 s > its MaxWait of 1.5 s when the second
// slot frees, and goes before the highs that came at 0.1 s.
func TestLanesAgeFromArrival(t *testing.T) {
	for name, low := range map[string]func(t0 time.Time) stamp{
		"no timestamp":                 func(time.Time) stamp { return stamp{level: 1} },
		"producer clock an hour ahead": func(t0 time.Time) stamp { return stamp{1, t0.Add(time.Hour), false} },
	} {
		t.Run(name, func(t *testing.T) {
			order, _ := startsOf(t, func(t0 time.Time) stream.Source[int] {
				return stamped(stamp{level: 0}, low(t0), stamp{level: pause}, stamp{level: 0}, stamp{level: 0}, stamp{level: 0}, stamp{level: 0})
			}, 1, flow.Lanes(backpressure.StrictPriority(2).Aging(0, 1500*time.Millisecond)))
			if want := []int{0, 0, 1, 0, 0, 0}; !equal(order, want) {
				t.Fatalf("start order %v, want %v: low aged 1.5 s after it arrived", order, want)
			}
		})
	}
}

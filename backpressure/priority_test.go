package backpressure_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ready returns the since slice of levels that all have work since t0.
func ready(levels ...int) []int64 {
	since := []int64{backpressure.NotReady, backpressure.NotReady, backpressure.NotReady}
	for _, l := range levels {
		since[l] = t0.UnixNano()
	}
	return since
}

func TestStrictServesTheHighestReadyLevel(t *testing.T) {
	pk := backpressure.StrictPriority(3).NewPicker()
	for _, c := range []struct {
		ready []int
		want  int
	}{{[]int{0, 1, 2}, 0}, {[]int{1, 2}, 1}, {[]int{2}, 2}, {nil, -1}} {
		for range 5 {
			if got := pk.Pick(ready(c.ready...), t0.UnixNano()); got != c.want {
				t.Fatalf("ready %v: picked %d, want %d", c.ready, got, c.want)
			}
		}
	}
}

// 6:3:1 is exact in every cycle of ten picks while every level has work,
// not only on average; a level with nothing ready lends its share.
func TestWeightedSharesAreExactPerCycle(t *testing.T) {
	pk := backpressure.WeightedPriority(6, 3, 1).NewPicker()
	for cycle := range 50 {
		var n [3]int
		for range 10 {
			n[pk.Pick(ready(0, 1, 2), t0.UnixNano())]++
		}
		if n != [3]int{6, 3, 1} {
			t.Fatalf("cycle %d: %v, want [6 3 1]", cycle, n)
		}
	}
	var n [3]int
	for range 400 {
		n[pk.Pick(ready(1, 2), t0.UnixNano())]++
	}
	if n != [3]int{0, 300, 100} {
		t.Fatalf("high idle: %v, want normal and low sharing 3:1 = [0 300 100]", n)
	}
}

// A message that waited past its level's MaxWait is served as one of the
// level above (older first among equals); past the next level's MaxWait
// too, as one of the level above that.
func TestAgingLiftsAWaitingMessage(t *testing.T) {
	p := backpressure.StrictPriority(3).Aging(0, time.Second, 2*time.Second)
	pk := p.NewPicker()
	now := t0.Add(10 * time.Second)
	since := []int64{now.Add(-100 * time.Millisecond).UnixNano(), backpressure.NotReady, now.Add(-2500 * time.Millisecond).UnixNano()}
	if got := pk.Pick(since, now.UnixNano()); got != 0 {
		t.Fatalf("low waited 2.5s (> 2s: as normal): picked %d, want high (0)", got)
	}
	since[2] = now.Add(-3500 * time.Millisecond).UnixNano() // > 2s + 1s: as high, and older
	if got := pk.Pick(since, now.UnixNano()); got != 2 {
		t.Fatalf("low waited 3.5s (as high, older than high's head): picked %d, want 2", got)
	}
	if e := p.Effective(2, 1500*time.Millisecond); e != 2 {
		t.Fatalf("Effective(2, 1.5s) = %d, want 2", e)
	}
	if e := p.Effective(2, time.Hour); e != 0 {
		t.Fatalf("Effective(2, 1h) = %d, want 0", e)
	}
}

// A message stamped at the Unix epoch (a Kafka record with CreateTime 0)
// is ready like any other. (Found in review: 0 meant 'not ready', Pick
// returned -1 with a level ready, and the stages indexed level -1.)
func TestPickAnEpochTimestamp(t *testing.T) {
	pk := backpressure.StrictPriority(2).Aging(0, time.Second).NewPicker()
	if got := pk.Pick([]int64{backpressure.NotReady, 0}, time.Now().UnixNano()); got != 1 {
		t.Fatalf("picked %d, want level 1, the only one ready", got)
	}
}

// A wait starts when the stage received the message, or earlier at the
// broker's append time, never at a time a producer chose nor at one that
// cannot be right.
func TestWaitStart(t *testing.T) {
	received := t0.UnixNano()
	past2262 := time.Unix(t0.Unix()+18_446_744_074, 0) // UnixNano wraps to t0 + 0.29 s
	for _, c := range []struct {
		name     string
		ts       time.Time
		appended bool
		want     int64
	}{
		{"appended 10 s before", t0.Add(-10 * time.Second), true, t0.Add(-10 * time.Second).UnixNano()},
		{"appended a year before", t0.AddDate(-1, 0, 0), true, t0.AddDate(-1, 0, 0).UnixNano()},
		{"produced 10 s before", t0.Add(-10 * time.Second), false, received},
		{"produced a year before", t0.AddDate(-1, 0, 0), false, received},
		{"no timestamp", time.Time{}, false, received},
		{"Kafka's -1: none", time.UnixMilli(-1), true, received},
		{"the epoch", time.Unix(0, 0), true, received},
		{"appended after receipt", t0.Add(time.Hour), true, received},
		{"appended 1 ms after receipt", t0.Add(time.Millisecond), true, received},
		{"appended past 2262", past2262, true, received},
		{"appended an hour before 2262 wrapped", past2262.Add(-time.Hour), true, received},
		{"produced past 2262", past2262, false, received},
	} {
		if got := backpressure.WaitStart(c.ts, c.appended, received); got != c.want {
			t.Errorf("%s: WaitStart(%v, %v) = %v, want %v", c.name, c.ts, c.appended, time.Unix(0, got).UTC(), time.Unix(0, c.want).UTC())
		}
	}
}

func TestPriorityConfigErrors(t *testing.T) {
	for arg, p := range map[string]backpressure.Priority{
		"levels":  backpressure.StrictPriority(0),
		"weights": backpressure.WeightedPriority(6, 0, 1),
		"Aging":   backpressure.StrictPriority(3).Aging(time.Second),
	} {
		var ce *stream.ConfigError
		if err := p.Validate(); !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "priority" {
			t.Errorf("%s: %v, want a ConfigError of priority naming %s", p, err, arg)
		}
	}
	// Every level but 0 ages (issue 15: a MaxWait <= 0 is an error); level
	// 0's is not used, whatever it is.
	for _, mw := range [][]time.Duration{{0, -time.Second, time.Second}, {0, time.Second, 0}} {
		var ce *stream.ConfigError
		if err := backpressure.StrictPriority(3).Aging(mw...).Validate(); !errors.As(err, &ce) || ce.Argument != "Aging" {
			t.Errorf("MaxWait %v: %v, want a ConfigError naming Aging", mw, err)
		}
	}
	for _, mw := range [][]time.Duration{{0, time.Second}, {-time.Second, time.Second}} {
		if err := backpressure.StrictPriority(2).Aging(mw...).Validate(); err != nil {
			t.Errorf("MaxWait %v: %v, want valid (level 0's is not used)", mw, err)
		}
	}
}

package backpressure_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

func feed(a *backpressure.Adaptive, n int, lat time.Duration, inFlight int, dropped bool) {
	for range n {
		a.Observe(backpressure.Sample{Latency: lat, InFlight: inFlight, Dropped: dropped})
	}
}

func TestAdaptiveSlowStartThenCutsProportionally(t *testing.T) {
	a, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Target: 10 * time.Millisecond, Initial: 8, Max: 100, Window: 10})
	if err != nil {
		t.Fatal(err)
	}
	// Saturated and fast: the limit doubles each window (slow start).
	for _, want := range []int{16, 32, 64, 100} {
		feed(a, 10, time.Millisecond, a.Limit(), false)
		if a.Limit() != want {
			t.Fatalf("limit %d, want %d", a.Limit(), want)
		}
	}
	// p99 at twice the target: cut by target/p99 = 0.5.
	feed(a, 10, 20*time.Millisecond, a.Limit(), false)
	if a.Limit() != 50 {
		t.Fatalf("limit after overshoot %d, want 50", a.Limit())
	}
	// After the first cut, increases are additive: +sqrt(50).
	feed(a, 10, time.Millisecond, a.Limit(), false)
	if a.Limit() != 57 {
		t.Fatalf("limit %d, want 57", a.Limit())
	}
	// Not saturated: no increase while the stage does not use its limit.
	feed(a, 10, time.Millisecond, 3, false)
	if a.Limit() != 57 {
		t.Fatalf("limit drifted to %d while idle", a.Limit())
	}
	// A dropped call cuts by Backoff whatever the latency.
	feed(a, 10, time.Millisecond, 3, true)
	if a.Limit() != 51 {
		t.Fatalf("limit after drop %d, want 51", a.Limit())
	}
}

func TestAdaptiveDefaultTargetIsTwiceTheBaseline(t *testing.T) {
	a, err := backpressure.NewAdaptive(backpressure.AdaptiveConfig{Initial: 20, Window: 10})
	if err != nil {
		t.Fatal(err)
	}
	feed(a, 10, 2*time.Millisecond, 20, false) // baseline 2 ms; p99 2 ms <= 4 ms: increase
	if a.Limit() != 40 {
		t.Fatalf("limit %d, want 40", a.Limit())
	}
	feed(a, 10, 8*time.Millisecond, 40, false) // 8 ms > 4 ms: cut by 0.5
	if a.Limit() != 20 {
		t.Fatalf("limit %d, want 20", a.Limit())
	}
	if st := a.Stats(); st.Baseline != 2*time.Millisecond || st.Increases != 1 || st.Decreases != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAdaptiveConfigErrors(t *testing.T) {
	for arg, c := range map[string]backpressure.AdaptiveConfig{
		"Target": {Target: -1}, "Min": {Min: 5, Max: 2}, "Initial": {Initial: 2000}, "Window": {Window: -1}, "Backoff": {Backoff: 1.5},
	} {
		_, err := backpressure.NewAdaptive(c)
		var ce *stream.ConfigError
		if !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "adaptive limiter" {
			t.Fatalf("%+v: %v, want a *stream.ConfigError of adaptive naming %s", c, err, arg)
		}
	}
	var ce *stream.ConfigError
	if err := backpressure.Fixed(0).Validate(); !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Argument != "limit" || ce.Stage != "fixed limit" {
		t.Fatalf("Fixed(0): %v, want a configuration error naming the limit", err)
	}
}

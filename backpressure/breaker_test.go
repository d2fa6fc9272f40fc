package backpressure_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

func TestBreakerOpensProbesAndBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 10, FailureRatio: 0.5,
			OpenFor: time.Second, MaxOpenFor: 8 * time.Second,
			OnStateChange: func(_ string, from, to backpressure.BreakerState) {
				changes = append(changes, from.String()+">"+to.String())
			}})
		if err != nil {
			t.Fatal(err)
		}
		call := func(ok bool) error {
			done, err := br.Allow()
			if err != nil {
				return err
			}
			done(ok)
			return nil
		}
		// Below the minimum throughput, failures do not open it.
		for range 9 {
			if err := call(false); err != nil {
				t.Fatal(err)
			}
		}
		if br.State() != backpressure.Closed {
			t.Fatal("opened below MinRequests")
		}
		if err := call(false); err != nil {
			t.Fatal(err)
		}
		err = call(true)
		var oe *backpressure.OpenError
		if !errors.As(err, &oe) || !errors.Is(err, backpressure.ErrBreakerOpen) || !stream.Classify(err).Transient ||
			stream.Classify(err).Reason != stream.ReasonBreakerOpen || stream.Classify(err).RetryAfter != time.Second {
			t.Fatalf("open breaker returned %v (%+v)", err, stream.Classify(err))
		}
		// After OpenFor a probe goes through; it fails: open twice as long.
		time.Sleep(time.Second + time.Millisecond)
		if err := call(false); err != nil {
			t.Fatalf("probe refused: %v", err)
		}
		time.Sleep(time.Second)
		if err := call(true); err == nil {
			t.Fatal("probe allowed 1 s after a failed probe; the open time should have doubled")
		}
		time.Sleep(time.Second + time.Millisecond)
		if err := call(true); err != nil { // 2 s after: a probe, that succeeds
			t.Fatalf("probe refused after the doubled open time: %v", err)
		}
		if br.State() != backpressure.Closed {
			t.Fatalf("state %v after a successful probe", br.State())
		}
		want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
		if len(changes) != len(want) {
			t.Fatalf("transitions %v, want %v", changes, want)
		}
		for i := range want {
			if changes[i] != want[i] {
				t.Fatalf("transitions %v, want %v", changes, want)
			}
		}
	})
}

func TestRetryBudget(t *testing.T) {
	b, err := backpressure.NewRetryBudget(0.1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !b.TryRetry() || !b.TryRetry() || b.TryRetry() {
		t.Fatal("the reserve of 2 should allow exactly 2 retries")
	}
	for range 10 {
		b.Request()
	}
	if !b.TryRetry() || b.TryRetry() {
		t.Fatal("10 requests at 10% should earn exactly 1 retry")
	}
	if b.Stats().Allowed != 3 || b.Stats().Exhausted != 2 {
		t.Fatalf("allowed %d exhausted %d", b.Stats().Allowed, b.Stats().Exhausted)
	}
	for arg, f := range map[string]func() error{
		"ratio": func() error { _, err := backpressure.NewRetryBudget(2, 1); return err },
		"burst": func() error { _, err := backpressure.NewRetryBudget(0.1, 0); return err },
	} {
		var ce *stream.ConfigError
		if err := f(); !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "retry budget" {
			t.Fatalf("bad %s: %v, want a *stream.ConfigError of retry-budget naming it", arg, err)
		}
	}
}

func TestBreakerConfigErrorsNameTheArgument(t *testing.T) {
	for arg, c := range map[string]backpressure.BreakerConfig{
		"Window":       {Name: "drones", Window: -time.Second},
		"OpenFor":      {Name: "drones", OpenFor: 2 * time.Minute, MaxOpenFor: time.Minute},
		"FailureRatio": {Name: "drones", FailureRatio: 1.5},
	} {
		_, err := backpressure.NewBreaker(c)
		var ce *stream.ConfigError
		if !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "breaker drones" {
			t.Fatalf("%+v: %v, want a *stream.ConfigError of breaker drones naming %s", c, err, arg)
		}
	}
}

// A call that did not reach the dependency (NotReached) decides nothing:
// closed, it is left out of MinRequests and of the failure ratio;
// half-open, its probe slot goes to the next call.
func TestBreakerNotReachedIsNeutral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 4, FailureRatio: 0.5, OpenFor: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		call := func(o backpressure.Outcome) error {
			done, err := br.AllowCall()
			if err != nil {
				return err
			}
			done(o)
			return nil
		}
		for range 100 {
			if err := call(backpressure.NotReached); err != nil {
				t.Fatal(err)
			}
		}
		// 100 not reached, then 4 real calls of which 2 fail: half of what
		// reached the dependency failed, so it opens.
		for _, o := range []backpressure.Outcome{backpressure.Succeeded, backpressure.Failed, backpressure.Succeeded} {
			if err := call(o); err != nil {
				t.Fatal(err)
			}
		}
		if br.State() != backpressure.Closed {
			t.Fatalf("breaker %v after 3 calls that reached the dependency, MinRequests 4", br.State())
		}
		if err := call(backpressure.Failed); err != nil {
			t.Fatal(err)
		}
		if br.State() != backpressure.Open {
			t.Fatalf("breaker %v after 2 failures in 4 calls that reached the dependency (and 100 that did not)", br.State())
		}
		time.Sleep(time.Second + time.Millisecond)
		// The probe does not reach the dependency: still half-open, and
		// the one slot (Probes 1) is free for the next call.
		if err := call(backpressure.NotReached); err != nil {
			t.Fatalf("probe refused: %v", err)
		}
		if br.State() != backpressure.HalfOpen {
			t.Fatalf("breaker %v after a probe that did not reach the dependency", br.State())
		}
		if err := call(backpressure.Succeeded); err != nil {
			t.Fatalf("the next probe refused after one that did not reach the dependency: %v", err)
		}
		if br.State() != backpressure.Closed {
			t.Fatalf("breaker %v after a successful probe", br.State())
		}
	})
}

package flow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// errNotYet is a failure before the service is called: a step whose
// precondition does not hold yet (a mark another copy holds, not stale).
var errNotYet = errors.New("started by a call not answered yet")

// Calls that fail before reaching the service (marked NotCalled) say
// nothing of its health: many of them must not open the breaker, which
// stays closed for the calls that do reach the healthy service. Before,
// each counted as a failure: 20 such errors opened a breaker for a
// service that answered every call it got.
func TestNotCalledErrorsDoNotOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var called atomic.Int64
		fn := func(_ context.Context, x int) (int, error) {
			if x%4 != 0 {
				return 0, stream.NotCalled(stream.Transient(errNotYet))
			}
			called.Add(1)
			return x, nil
		}
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 5, OpenFor: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		a := flow.MapAsync(1, fn, flow.Breaker(br))
		g := stream.New()
		out := sink.Collect[int]()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(200))), a), out)
		stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
		run(t, g)
		st := a.Stats()
		if br.State() != backpressure.Closed || st.Refused != 0 || len(out.Values()) != 50 || called.Load() != 50 {
			t.Fatalf("breaker %v, %d refused, %d delivered, %d called, of 50 good calls among 150 not made: want closed, none refused, 50 delivered",
				br.State(), st.Refused, len(out.Values()), called.Load())
		}
	})
}

// A half-open breaker's probe that fails before reaching the service
// decides nothing: the breaker stays half-open and its probe slot goes to
// the next call, whose success closes it. Before, the not-called probe
// reopened the breaker (for twice as long each time), and every probe of
// a replay that could not call yet kept it open.
func TestNotCalledProbeReleasesTheHalfOpenSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down, notYet atomic.Bool
		fn := func(_ context.Context, x int) (int, error) {
			switch {
			case notYet.Load():
				notYet.Store(false) // the first probe only
				return 0, stream.NotCalled(stream.Transient(errNotYet))
			case down.Load():
				return 0, &flow.HTTPError{Status: 503}
			}
			return x, nil
		}
		br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc", MinRequests: 5, OpenFor: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		down.Store(true)
		for range 5 { // open it
			done, err := br.Allow()
			if err != nil {
				t.Fatal(err)
			}
			done(false)
		}
		if br.State() != backpressure.Open {
			t.Fatalf("breaker %v after 5 failures of 5", br.State())
		}
		time.Sleep(time.Second + time.Millisecond)
		if br.State() != backpressure.HalfOpen {
			t.Fatalf("breaker %v after its open time", br.State())
		}
		down.Store(false)
		notYet.Store(true)
		a := flow.MapAsync(1, fn, flow.Breaker(br))
		g := stream.New()
		out := sink.Collect[int]()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(2))), a), out)
		stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
		run(t, g)
		// The first message's probe was not called (no retry: it fails);
		// the second must get the slot and close the breaker.
		if br.State() != backpressure.Closed || a.Stats().Refused != 0 || len(out.Values()) != 1 {
			t.Fatalf("breaker %v, %d refused, %d delivered after a not-called probe and a good one: want closed, none refused, 1 delivered",
				br.State(), a.Stats().Refused, len(out.Values()))
		}
	})
}

// countingLimiter counts the calls it observes.
type countingLimiter struct{ observed atomic.Int64 }

func (l *countingLimiter) Limit() int                  { return 4 }
func (l *countingLimiter) Observe(backpressure.Sample) { l.observed.Add(1) }

// The latency of a call that did not reach its service is not the
// service's: the limiter and OnCall's call histogram leave it out (OnCall
// itself hears of it, marked).
func TestNotCalledErrorsAreKeptFromTheLimiter(t *testing.T) {
	lim := &countingLimiter{}
	var notCalled, calls atomic.Int64
	fn := func(_ context.Context, x int) (int, error) {
		if x%2 == 0 {
			return 0, stream.NotCalled(stream.Transient(errNotYet))
		}
		return x, nil
	}
	a := flow.MapAsync(2, fn, flow.WithLimiter(lim), flow.OnCall(func(c flow.CallInfo) {
		calls.Add(1)
		if c.NotCalled {
			notCalled.Add(1)
		}
	}))
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(100))), a), out)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
	run(t, g)
	if lim.observed.Load() != 50 || calls.Load() != 100 || notCalled.Load() != 50 {
		t.Fatalf("limiter observed %d, OnCall heard of %d (%d not called), of 50 calls made and 50 not: want 50, 100 (50)",
			lim.observed.Load(), calls.Load(), notCalled.Load())
	}
}

package backpressure_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
)

// A breaker that closes again after its dependency answered a probe is
// recorded under its name and signalled; opening and half-opening are
// not recoveries.
func TestRecoveryRecordsABreakerClosingAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := backpressure.NewRecovery()
		b, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "drones", MinRequests: 2, OpenFor: time.Second,
			OnStateChange: rec.OnStateChange})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			done, err := b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			done(false)
		}
		if b.State() != backpressure.Open || !rec.At("drones").IsZero() {
			t.Fatalf("state %v, recovered at %v: want open, no recovery", b.State(), rec.At("drones"))
		}
		select {
		case <-rec.C():
			t.Fatal("signalled while the dependency is down")
		default:
		}
		time.Sleep(time.Second + time.Millisecond)
		done, err := b.Allow() // the probe
		if err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		done(true)
		if b.State() != backpressure.Closed || !rec.At("drones").Equal(back) || !rec.At("packages").IsZero() {
			t.Fatalf("state %v, recovered at %v (want %v)", b.State(), rec.At("drones"), back)
		}
		select {
		case <-rec.C():
		default:
			t.Fatal("not signalled")
		}
	})
}

// Watch takes the first success after a run of failures for a recovery;
// a failure now and then among successes is none.
func TestRecoveryWatchesCallsWithoutABreaker(t *testing.T) {
	rec := backpressure.NewRecovery()
	undo := rec.Watch("undo", 3)
	for _, ok := range []bool{true, false, true, false, false, true} {
		undo(ok)
	}
	if !rec.At("undo").IsZero() {
		t.Fatalf("recovered at %v after at most 2 failures in a row; want none", rec.At("undo"))
	}
	for range 3 {
		undo(false)
	}
	undo(true)
	if rec.At("undo").IsZero() {
		t.Fatal("no recovery after 3 failures in a row and a success")
	}
	select {
	case <-rec.C():
	default:
		t.Fatal("not signalled")
	}
}

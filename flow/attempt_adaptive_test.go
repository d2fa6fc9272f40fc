package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// With adaptive timeouts a call's timeout depends on what is left of its
// budget: a call that starts after another may be due before it, and is
// timed out at its own deadline, not at the other's.
func TestAdaptiveClockTimesOutEachCallAtItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := newAdaptiveTimeout(3, 100*time.Millisecond, 2*time.Second)
		for range timeoutWindow {
			at.observe(400*time.Millisecond, 0)
		}
		if got := at.timeout(0); got != 1200*time.Millisecond {
			t.Fatalf("after a window of 400 ms calls the timeout is %v, want 3 x 400 ms", got)
		}
		c := newAttemptClock(context.Background(), 100*time.Millisecond, false, at)
		defer c.stop()
		start := time.Now()
		long, endLong := c.start(start, 0)
		defer endLong()
		short, endShort := c.start(start, 150*time.Millisecond)
		defer endShort()
		<-short.Done()
		if waited := time.Since(start); waited > 151*time.Millisecond || !errors.Is(short.Err(), context.DeadlineExceeded) {
			t.Fatalf("the call with 150 ms left ended after %v (%v); want its own deadline", waited, short.Err())
		}
		if long.Err() != nil {
			t.Fatalf("the call with 1.2 s ended with the other: %v", long.Err())
		}
		if got := c.timeoutOf(short); got != 150*time.Millisecond {
			t.Fatalf("its timeout reads %v, want 150ms", got)
		}
		// None left: the least timeout, as a fixed one would give.
		spent, endSpent := c.start(time.Now(), -1)
		defer endSpent()
		if got := c.timeoutOf(spent); got != 100*time.Millisecond {
			t.Fatalf("an attempt with its budget spent gets %v, want the floor 100ms", got)
		}
	})
}

// The timeout rises with the service's p99, at once when a call times out
// (but not again for calls timed out with an older timeout), up to its
// ceiling, and falls by at most half a window.
func TestAdaptiveTimeoutMoves(t *testing.T) {
	at := newAdaptiveTimeout(3, 100*time.Millisecond, time.Second)
	feed := func(d time.Duration) {
		for range timeoutWindow {
			at.observe(d, 0)
		}
	}
	feed(10 * time.Millisecond)
	if got := at.timeout(0); got != 100*time.Millisecond {
		t.Fatalf("fast calls: %v, want the floor", got)
	}
	feed(250 * time.Millisecond)
	if got := at.timeout(0); got != 750*time.Millisecond {
		t.Fatalf("after 250 ms calls: %v, want 750ms", got)
	}
	feed(900 * time.Millisecond)
	if got := at.timeout(0); got != time.Second {
		t.Fatalf("after 900 ms calls: %v, want the ceiling 1s", got)
	}
	for _, want := range []time.Duration{500, 250, 125, 100} {
		feed(time.Millisecond)
		if got := at.timeout(0); got != want*time.Millisecond {
			t.Fatalf("falling: %v, want %v ms", got, want)
		}
	}
	at.observe(100*time.Millisecond, 100*time.Millisecond)
	if got := at.timeout(0); got != 300*time.Millisecond {
		t.Fatalf("after a call timed out at 100 ms: %v, want 300ms at once", got)
	}
	at.observe(100*time.Millisecond, 100*time.Millisecond) // another call of the same old timeout
	if got := at.timeout(0); got != 300*time.Millisecond {
		t.Fatalf("after a second call timed out at the old 100 ms: %v, want still 300ms", got)
	}
	at.observe(300*time.Millisecond, 300*time.Millisecond)
	if got := at.timeout(0); got != 900*time.Millisecond {
		t.Fatalf("after a call timed out at 300 ms: %v, want 900ms", got)
	}
}

// When a service turns slow, the first call to time out raises the
// stage's timeout, and the calls in flight are given the raised timeout
// (from their own start, within their own limit) instead of being cut at
// the one that proved too short: of a wave of slow calls, one is cut at
// each step of the rise.
func TestAdaptiveClockExtendsTheCallsInFlightWhenTheTimeoutRises(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := newAdaptiveTimeout(3, 100*time.Millisecond, 2*time.Second)
		c := newAttemptClock(context.Background(), 100*time.Millisecond, false, at)
		defer c.stop()
		start := time.Now()
		since := func() time.Duration { return time.Since(start) }
		first, endFirst := c.start(start, 0)
		defer endFirst()
		same, endSame := c.start(start, 0) // due at the same instant as first
		defer endSame()
		time.Sleep(10 * time.Millisecond)
		later, endLater := c.start(time.Now(), 0)
		defer endLater()
		capped, endCapped := c.start(time.Now(), 400*time.Millisecond) // its budget leaves it 400 ms
		defer endCapped()

		<-first.Done()
		if since() != 100*time.Millisecond || !errors.Is(first.Err(), context.DeadlineExceeded) {
			t.Fatalf("the first call ended at %v (%v), want cut at its 100 ms", since(), first.Err())
		}
		if got := at.timeout(0); got != 300*time.Millisecond {
			t.Fatalf("after a call timed out at 100 ms the timeout is %v, want 300ms at once", got)
		}
		time.Sleep(50 * time.Millisecond)
		if same.Err() != nil || later.Err() != nil || capped.Err() != nil {
			t.Fatalf("at 150 ms the calls in flight ended (%v, %v, %v), want them given the raised timeout",
				same.Err(), later.Err(), capped.Err())
		}
		if d, _ := later.Deadline(); d.Sub(start) != 2010*time.Millisecond {
			t.Fatalf("the later call's Deadline is %v after the first's start, want 2.01s (its start + the 2 s ceiling, the latest it may be extended to)", d.Sub(start))
		}
		<-same.Done()
		if since() != 300*time.Millisecond || c.timeoutOf(same) != 300*time.Millisecond {
			t.Fatalf("the call due with the first ended at %v, timeout %v; want cut at 300ms, its raised timeout", since(), c.timeoutOf(same))
		}
		<-capped.Done()
		if since() != 410*time.Millisecond || c.timeoutOf(capped) != 400*time.Millisecond {
			t.Fatalf("the call with 400 ms of budget ended at %v, timeout %v; want 410ms and 400ms: never past its limit",
				since(), c.timeoutOf(capped))
		}
		if later.Err() != nil {
			t.Fatalf("at 410 ms the later call ended (%v), want it given the 900 ms the second cut raised the timeout to", later.Err())
		}
		if d, _ := later.Deadline(); d.Sub(start) != 2010*time.Millisecond {
			t.Fatalf("the later call's Deadline is %v after the first's start, want it still 2.01s", d.Sub(start))
		}
	})
}

// A context derived from a call's with a timeout of its own, shorter than
// the longest the call may be given but longer than its deadline of the
// moment, must still end at its own timeout when the clock extends the
// call: the context package (and SentOnWriteWithin) give such a context no
// timer of its own when the parent's Deadline is earlier, so the parent's
// Deadline must never move later than what it reported.
func TestAdaptiveCallsDerivedTimeoutHoldsWhenTheCallIsExtended(t *testing.T) {
	for _, fromSend := range []bool{false, true} {
		t.Run(fmt.Sprint("from send ", fromSend), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				at := newAdaptiveTimeout(3, 100*time.Millisecond, 2*time.Second)
				c := newAttemptClock(context.Background(), 100*time.Millisecond, fromSend, at)
				defer c.stop()
				start := time.Now()
				first, endFirst := c.start(start, 0)
				defer endFirst()
				call, endCall := c.start(start, 0)
				defer endCall()
				if fromSend {
					Sent(first)
					Sent(call)
				}
				d1, _ := call.Deadline()
				derived, cancel := context.WithTimeout(call, 150*time.Millisecond)
				defer cancel()
				bounded, release := SentOnWriteWithin(call, 150*time.Millisecond)
				defer release()
				<-first.Done() // cut at 100 ms: the timeout rises to 300 ms, call is extended
				if d2, _ := call.Deadline(); d2 != d1 {
					t.Errorf("the call's Deadline moved from %v to %v after start, want it fixed", d1.Sub(start), d2.Sub(start))
				}
				<-derived.Done()
				if got := time.Since(start); got != 150*time.Millisecond || !errors.Is(derived.Err(), context.DeadlineExceeded) {
					t.Errorf("context.WithTimeout(call, 150ms) ended at %v (%v), want at 150ms", got, derived.Err())
				}
				<-bounded.Done()
				if got := time.Since(start); got != 150*time.Millisecond {
					t.Errorf("SentOnWriteWithin(call, 150ms) ended at %v (%v), want at 150ms", got, bounded.Err())
				}
				<-call.Done()
				if got := time.Since(start); got != 300*time.Millisecond {
					t.Errorf("the call ended at %v, want at its raised 300 ms", got)
				}
			})
		})
	}
}

// The stage stopping while the clock extends calls: every call in flight
// (those extended, those waiting for their send, those just due) ends
// with the stage's error, a call started after it ends at once, and the
// clock's goroutine ends.
func TestAdaptiveClockStoppingWhileItExtendsEndsEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(context.Background())
		stopped := errors.New("the stage stopped")
		at := newAdaptiveTimeout(3, 100*time.Millisecond, 2*time.Second)
		c := newAttemptClock(parent, 100*time.Millisecond, true, at)
		var calls []context.Context
		for i := range 20 {
			ctx, end := c.start(time.Now(), 0)
			defer end()
			if i%4 != 3 {
				Sent(ctx) // one in four never sent: no deadline yet
			}
			calls = append(calls, ctx)
			time.Sleep(5 * time.Millisecond)
		}
		<-calls[0].Done() // the first cut: the others due are extended
		if at.timeout(0) <= 100*time.Millisecond {
			t.Fatalf("after the first cut the timeout is %v, want it raised", at.timeout(0))
		}
		time.Sleep(100 * time.Millisecond) // the sent calls, due from 105 to 195 ms, are extended
		for i, ctx := range calls[1:] {
			if sent := i%4 != 2; sent && (ctx.Err() != nil || c.timeoutOf(ctx) != 300*time.Millisecond) {
				t.Fatalf("at 200 ms call %d: %v, timeout %v; want it running, extended to 300 ms", i+1, ctx.Err(), c.timeoutOf(ctx))
			}
		}
		cancel(stopped)
		for i, ctx := range calls[1:] {
			<-ctx.Done()
			// Extended to 300 ms from their send: none is cut before the
			// stage stops at 200 ms.
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("call %d (sent: %v) ended with %v, want the stage's end", i+1, i%4 != 2, ctx.Err())
			}
		}
		late, endLate := c.start(time.Now(), 0)
		<-late.Done()
		endLate()
		c.stop()
	})
}

// Calls of many starts and limits, extended as cut calls raise the
// timeout: each is cut at its own deadline as it stands when due (start +
// its final timeout, never past its limit), whatever the order the
// extensions leave the queue in (heap.Fix of its head).
func TestAdaptiveClockCutsEveryExtendedCallAtItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := newAdaptiveTimeout(2, 10*time.Millisecond, 700*time.Millisecond)
		c := newAttemptClock(context.Background(), 10*time.Millisecond, false, at)
		defer c.stop()
		rng := rand.New(rand.NewPCG(1, 2))
		type call struct {
			ctx   context.Context
			start time.Time
			limit time.Duration
			ended time.Time
		}
		var calls []*call
		var wg sync.WaitGroup
		for range 200 {
			limit := time.Duration(0)
			if rng.IntN(3) == 0 {
				limit = time.Duration(5+rng.IntN(300)) * time.Millisecond
			}
			now := time.Now()
			ctx, end := c.start(now, limit)
			cl := &call{ctx: ctx, start: now, limit: limit}
			calls = append(calls, cl)
			wg.Go(func() {
				<-ctx.Done()
				cl.ended = time.Now()
				end()
			})
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		wg.Wait()
		for i, cl := range calls {
			timeout := c.timeoutOf(cl.ctx)
			if late := cl.ended.Sub(cl.start.Add(timeout)); late < 0 || late > time.Millisecond {
				t.Errorf("call %d (limit %v) ended %v after its start, its timeout %v", i, cl.limit, cl.ended.Sub(cl.start), timeout)
			}
			if cl.limit > 0 && timeout > max(cl.limit, 10*time.Millisecond) {
				t.Errorf("call %d was given %v, past its %v limit", i, timeout, cl.limit)
			}
			if timeout > 700*time.Millisecond {
				t.Errorf("call %d was given %v, past the 700 ms ceiling", i, timeout)
			}
		}
	})
}

package flow

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A call may bound itself by what is left of a budget of its own
// (SentOnWriteWithin(ctx, time.Until(due))): every call then asks for a
// bound of another length. Once those calls returned and their bounds
// passed, the clock must hold nothing for them: a queue kept per length
// ever asked for grows with every call for as long as the stage runs,
// and every later bound and sweep walks all of them.
func TestSentOnWriteWithinLengthsOfEndedBoundsAreNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		defer stop()
		c := newAttemptClock(parent, time.Minute, true, nil)
		defer c.stop()
		const calls = 1000
		for i := range calls {
			call, finish := c.start(time.Now(), 0)
			ctx, release := SentOnWriteWithin(call, time.Second+time.Duration(i)*time.Microsecond)
			if _, ok := ctx.(*boundCtx); !ok {
				t.Fatalf("call %d: a bound of the clock's was expected, got a %T", i, ctx)
			}
			release()
			finish()
		}
		time.Sleep(3 * time.Second) // every bound's deadline passed: the sweeper ran
		synctest.Wait()
		c.mu.Lock()
		queues, held := len(c.bounds), 0
		for _, bq := range c.bounds {
			held += bq.q.len()
		}
		c.mu.Unlock()
		if held != 0 {
			t.Errorf("%d bounds still queued after all ended and passed", held)
		}
		if queues > 1 {
			t.Errorf("the clock keeps %d queues of bounds after %d calls with bounds of as many lengths, all ended: want at most one", queues, calls)
		}
	})
}

// Released bounds behind a bound that is still running (a call that hangs)
// are kept only until that one's deadline: then the queue is empty.
func TestSentOnWriteWithinReleasedBoundsBehindAHungOneGoAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		defer stop()
		c := newAttemptClock(parent, time.Minute, true, nil)
		defer c.stop()
		hung, finishHung := c.start(time.Now(), 0)
		hungCtx, releaseHung := SentOnWriteWithin(hung, 2*time.Second)
		for range 500 {
			call, finish := c.start(time.Now(), 0)
			_, release := SentOnWriteWithin(call, 2*time.Second)
			release()
			finish()
		}
		<-hungCtx.Done()
		if !errors.Is(hungCtx.Err(), context.DeadlineExceeded) {
			t.Fatalf("the hung call's bound ended with %v", hungCtx.Err())
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		c.mu.Lock()
		held := 0
		for _, bq := range c.bounds {
			held += bq.q.len()
		}
		c.mu.Unlock()
		if held != 0 {
			t.Errorf("%d bounds still queued after every one ended and passed its deadline", held)
		}
		releaseHung()
		finishHung()
	})
}

// Where ctx ends sooner than the bound anyway, SentOnWriteWithin returns
// no bound of its own; its doc still says the returned context ends "when
// released", as context.WithTimeout's does on cancel. A caller that hands
// the context to work that outlives the call (or watches it with
// context.AfterFunc) relies on that.
func TestSentOnWriteWithinReleaseEndsTheContextWhereCtxEndsSooner(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx, release := SentOnWriteWithin(parent, 2*time.Hour)
	release()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("released: Err %v, want context.Canceled (as context.WithTimeout's cancel gives)", ctx.Err())
	}
	if parent.Err() != nil {
		t.Errorf("releasing the bound ended its parent: %v", parent.Err())
	}
}

// A bound asked for after the call returned, or after the stage stopped,
// ends at once with the call's error, and the clock keeps nothing for it.
func TestSentOnWriteWithinAfterTheCallOrTheStageEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		c := newAttemptClock(parent, time.Minute, true, nil)
		defer c.stop()
		call, finish := c.start(time.Now(), 0)
		finish()
		ctx, release := SentOnWriteWithin(call, time.Second)
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("a bound of a call that returned: Err %v, want Canceled", ctx.Err())
		}
		release()

		running, finishRunning := c.start(time.Now(), 0)
		stop()
		synctest.Wait()
		ctx, release = SentOnWriteWithin(running, time.Second)
		if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(running.Err(), context.Canceled) {
			t.Errorf("a bound after the stage stopped: Err %v (the call's %v), want Canceled", ctx.Err(), running.Err())
		}
		release()
		finishRunning()
		late, finishLate := c.start(time.Now(), 0)
		ctx, release = SentOnWriteWithin(late, time.Second)
		if ctx.Err() == nil {
			t.Error("a bound of a call started after the stage stopped is running")
		}
		release()
		finishLate()
		c.mu.Lock()
		held := 0
		for _, bq := range c.bounds {
			held += bq.q.len()
		}
		c.mu.Unlock()
		if held != 0 {
			t.Errorf("%d bounds queued for calls that had ended", held)
		}
	})
}

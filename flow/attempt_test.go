package flow

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// A call's context behaves as context.WithTimeout's: it ends at the
// deadline with DeadlineExceeded (also as its Cause), carries the parent's
// values, cancels what is derived from it, ends with the parent, and is
// cancelled once the call returns.
func TestAttemptContext(t *testing.T) {
	if cancelCtxKey == nil {
		t.Fatal("the context package's cancel key was not learned: every call would fall back to context.WithTimeout")
	}
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		defer stop()
		c := newAttemptClock(parent, 20*time.Millisecond, false, nil)
		defer c.stop()

		start := time.Now()
		ctx, end := c.start(start, 0)
		if ctx.Value(ctxKey{}) != "v" {
			t.Fatal("the parent's value is lost")
		}
		if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(20*time.Millisecond)) {
			t.Fatalf("deadline %v %v", d, ok)
		}
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()
		afterRan := make(chan struct{})
		context.AfterFunc(ctx, func() { close(afterRan) })
		<-ctx.Done()
		if waited := time.Since(start); waited < 20*time.Millisecond || waited > 21*time.Millisecond {
			t.Fatalf("ended after %v, want 20 ms (the sweep wakes at most 1 ms late)", waited)
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatalf("err %v cause %v", ctx.Err(), context.Cause(ctx))
		}
		<-child.Done()
		<-afterRan
		end()

		// A call that returns in time is cancelled by its end, not timed
		// out.
		ctx, end = c.start(time.Now(), 0)
		end()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("after the call: %v", ctx.Err())
		}

		// The parent's end cancels the calls that still run, and any
		// later.
		ctx, end = c.start(time.Now(), 0)
		defer end()
		stop()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("after the parent ended: %v", ctx.Err())
		}
		synctest.Wait()
		late, endLate := c.start(time.Now(), 0)
		defer endLate()
		if late.Err() == nil {
			t.Fatal("a call started after the parent ended is not cancelled")
		}
	})
}

// Many calls, half quick and half slower than the timeout: the slow ones
// end with DeadlineExceeded at their deadline, the quick ones never do.
func TestAttemptContextMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), 30*time.Millisecond, false, nil)
		defer c.stop()
		errs := make(chan error, 200)
		for i := range 200 {
			go func() {
				time.Sleep(time.Duration(i) * time.Millisecond / 4) // starts spread over 50 ms
				ctx, end := c.start(time.Now(), 0)
				defer end()
				if i%2 == 0 {
					time.Sleep(10 * time.Millisecond)
					errs <- ctx.Err()
					return
				}
				<-ctx.Done()
				if d, _ := ctx.Deadline(); time.Since(d) > time.Millisecond || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					errs <- errors.New("a slow call did not end at its deadline")
					return
				}
				errs <- nil
			}()
		}
		for range 200 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}

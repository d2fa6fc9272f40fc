package flow

import (
	"context"
	"errors"
	"testing"
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
	parent, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer stop()
	c := newAttemptClock(parent, 20*time.Millisecond)
	defer c.stop()

	ctx, end := c.start(time.Now())
	if ctx.Value(ctxKey{}) != "v" {
		t.Fatal("the parent's value is lost")
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
		t.Fatalf("deadline %v %v", d, ok)
	}
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	var afterRan = make(chan struct{})
	context.AfterFunc(ctx, func() { close(afterRan) })
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline never came")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		t.Fatalf("err %v cause %v", ctx.Err(), context.Cause(ctx))
	}
	<-child.Done()
	<-afterRan
	end()

	// A call that returns in time is cancelled by its end, not timed out.
	ctx, end = c.start(time.Now())
	end()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the call: %v", ctx.Err())
	}

	// The parent's end cancels the calls that still run, and any later.
	ctx, end = c.start(time.Now())
	defer end()
	stop()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the parent ended: %v", ctx.Err())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		late, endLate := c.start(time.Now())
		endLate()
		if late.Err() != nil || time.Now().After(deadline) {
			break
		}
	}
}

// Many calls with random durations: those past the timeout end with
// DeadlineExceeded, the others never do.
func TestAttemptContextMany(t *testing.T) {
	c := newAttemptClock(context.Background(), 30*time.Millisecond)
	defer c.stop()
	errs := make(chan error, 200)
	for i := range 200 {
		go func() {
			ctx, end := c.start(time.Now())
			defer end()
			d := time.Duration(i%2) * 100 * time.Millisecond // 0 or 100 ms
			select {
			case <-ctx.Done():
				if d == 0 {
					errs <- errors.New("a quick call timed out")
					return
				}
				errs <- nil
			case <-time.After(d):
				if d > 0 {
					errs <- errors.New("a 100 ms call outlived a 30 ms timeout")
					return
				}
				errs <- nil
			}
		}()
	}
	for range 200 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

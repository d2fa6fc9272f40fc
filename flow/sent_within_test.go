package flow

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

// A bound behaves as context.WithTimeout of SentOnWrite's context would:
// the call's values and Sent's key through it, its own deadline, and it
// ends at the bound with DeadlineExceeded (a call waiting for its send),
// with the call's context and its error (the attempt timed out, the call
// returned, the stage stopped), or when released; what is derived from it
// ends with it; the call's context does not end with it.
func TestSentOnWriteWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		defer stop()
		c := newAttemptClock(parent, 20*time.Millisecond, true, nil)
		defer c.stop()
		synctest.Wait() // the clock's sweeper sleeps, with nothing to wake for

		// Never sent: the bound ends the wait.
		start := time.Now()
		call, finish := c.start(start, 0)
		ctx, release := SentOnWriteWithin(context.WithValue(call, ctxKey{}, "v"), 50*time.Millisecond)
		if _, ok := ctx.(*boundCtx); !ok {
			t.Fatalf("a call's bound is a %T, not the clock's", ctx)
		}
		if ctx.Value(ctxKey{}) != "v" {
			t.Fatal("the call's value is lost")
		}
		if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(50*time.Millisecond)) {
			t.Fatalf("deadline %v %v, want the bound's", d, ok)
		}
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		<-ctx.Done()
		if waited := time.Since(start); waited < 50*time.Millisecond || waited > 51*time.Millisecond {
			t.Fatalf("ended after %v, want 50 ms (the sweep wakes at most 1 ms late)", waited)
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Fatalf("err %v cause %v", ctx.Err(), context.Cause(ctx))
		}
		<-child.Done()
		<-ran
		if call.Err() != nil {
			t.Fatalf("the call's context ended with its bound: %v", call.Err())
		}
		release()
		if sent := finish(); !sent.IsZero() {
			t.Fatal("a call never sent says it was")
		}

		// Sent through the bound: the attempt's timeout (20 ms) ends the
		// call first, and the bound with it, with its error.
		start = time.Now()
		call, finish = c.start(start, 0)
		ctx, release = SentOnWriteWithin(call, 50*time.Millisecond)
		Sent(ctx)
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) > 21*time.Millisecond || call.Err() == nil {
			t.Fatalf("after the attempt's timeout: bound %v at %v, call %v", ctx.Err(), time.Since(start), call.Err())
		}
		release()
		if sent := finish(); !sent.Equal(start) {
			t.Fatalf("sent at %v, want %v: Sent through the bound did not reach the call", sent, start)
		}

		// Released before its end: Canceled, the call still running.
		call, finish = c.start(time.Now(), 0)
		ctx, release = SentOnWriteWithin(call, 50*time.Millisecond)
		release()
		if !errors.Is(ctx.Err(), context.Canceled) || call.Err() != nil {
			t.Fatalf("released: bound %v, call %v", ctx.Err(), call.Err())
		}
		// The call returned: its bound ends, Canceled.
		ctx, release = SentOnWriteWithin(call, 50*time.Millisecond)
		finish()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("after the call returned: %v", ctx.Err())
		}
		release()
		// Bounded after the call's end: ended already.
		if ctx, release = SentOnWriteWithin(call, 50*time.Millisecond); !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("bounded after the call's end: %v", ctx.Err())
		}
		release()

		// The stage stops: the bound of a call waiting ends with it.
		call, finish = c.start(time.Now(), 0)
		defer finish()
		ctx, release = SentOnWriteWithin(call, 50*time.Millisecond)
		defer release()
		stop()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("after the stage stopped: %v", ctx.Err())
		}
		synctest.Wait()
	})
}

// Released bounds do not pile up in the clock: a queue holds only what
// was bounded before the oldest bound still in use.
func TestSentOnWriteWithinDropsReleasedBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), 0, true, nil)
		defer c.stop()
		for range 1000 {
			call, finish := c.start(time.Now(), 0)
			_, release := SentOnWriteWithin(call, time.Minute)
			release()
			finish()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.bounds) != 1 || c.bounds[0].q.len() > 1 {
			t.Fatalf("%d queues, the first of %d bounds, after 1,000 bounds released", len(c.bounds), c.bounds[0].q.len())
		}
	})
}

// Where the bound cannot matter (the context ends sooner), or the context
// is not a call's of a stage timed from the send, the bound is what
// context.WithTimeout gives.
func TestSentOnWriteWithinElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), 20*time.Millisecond, false, nil)
		defer c.stop()
		call, finish := c.start(time.Now(), 0)
		defer finish()
		ctx, release := SentOnWriteWithin(call, time.Second)
		if dl, _ := ctx.Deadline(); !dl.Equal(func() time.Time { d, _ := call.Deadline(); return d }()) {
			t.Fatalf("a call that ends in 20 ms bounded to 1 s: deadline %v, want the call's", dl)
		}
		release()
		if !errors.Is(ctx.Err(), context.Canceled) || call.Err() != nil {
			t.Fatalf("released: %v (the call: %v), want Canceled and the call going on", ctx.Err(), call.Err())
		}

		start := time.Now()
		ctx, release = SentOnWriteWithin(context.Background(), 30*time.Millisecond)
		defer release()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) != 30*time.Millisecond {
			t.Fatalf("outside a stage: %v after %v", ctx.Err(), time.Since(start))
		}
	})
}

// A bound due before the deadline the clock sleeps for (a call sent, with
// a long attempt timeout) still ends on time.
func TestSentOnWriteWithinWakesTheClockSooner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), time.Minute, true, nil)
		defer c.stop()
		sent, finishSent := c.start(time.Now(), 0)
		defer finishSent()
		Sent(sent)
		synctest.Wait() // the clock sleeps until the sent call's deadline, a minute on
		start := time.Now()
		call, finish := c.start(start, 0)
		defer finish()
		ctx, release := SentOnWriteWithin(call, 50*time.Millisecond)
		defer release()
		<-ctx.Done()
		if waited := time.Since(start); !errors.Is(ctx.Err(), context.DeadlineExceeded) || waited > 51*time.Millisecond {
			t.Fatalf("a 50 ms bound ended after %v: %v", waited, ctx.Err())
		}
	})
}

// A request made with a bound marks its call sent once written and
// answered at its answer, as one made with SentOnWrite's context does.
func TestSentOnWriteWithinMarksTheCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c := newAttemptClock(context.Background(), time.Minute, true, nil)
	defer c.stop()
	call, finish := c.start(time.Now(), 0)
	ctx, release := SentOnWriteWithin(call, time.Minute)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	release()
	answered := call.(*attemptCtx).answeredAt()
	if sent := finish(); sent.IsZero() || answered.IsZero() || answered.Before(sent) {
		t.Fatalf("sent at %v, answered at %v: the bound's request did not mark its call", sent, answered)
	}
}

package flow

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// clocks runs f on a clock timed from send, with the attempt contexts and
// with the context package's (the fallback, should the cancel key not be
// learned).
func clocks(t *testing.T, f func(t *testing.T, newClock func(context.Context, time.Duration) *attemptClock)) {
	for _, std := range []bool{false, true} {
		t.Run(fmt.Sprintf("std=%v", std), func(t *testing.T) {
			f(t, func(parent context.Context, timeout time.Duration) *attemptClock {
				c := newAttemptClock(parent, timeout, true, nil)
				c.std = std // read by start only
				return c
			})
		})
	}
}

// A call timed from its send has no deadline until Sent (through a context
// derived from its own), then ends timeout after the first Sent; later
// ones change nothing, and its end reports when it was sent.
func TestAttemptContextFromSend(t *testing.T) {
	clocks(t, func(t *testing.T, newClock func(context.Context, time.Duration) *attemptClock) {
		synctest.Test(t, func(t *testing.T) {
			c := newClock(context.Background(), 20*time.Millisecond)
			defer c.stop()
			ctx, end := c.start(time.Now(), 0)
			if d, ok := ctx.Deadline(); ok {
				t.Fatalf("deadline %v before the send", d)
			}
			time.Sleep(time.Hour) // waiting for a connection, 180,000 timeouts long
			if ctx.Err() != nil {
				t.Fatalf("an unsent call ended: %v", ctx.Err())
			}
			sent := time.Now()
			Sent(context.WithValue(ctx, ctxKey{}, "derived"))
			if d, ok := ctx.Deadline(); !ok || !d.Equal(sent.Add(20*time.Millisecond)) {
				t.Fatalf("deadline %v %v after the send at %v", d, ok, sent)
			}
			time.Sleep(5 * time.Millisecond)
			Sent(ctx) // a second request of the same call: still timed from the first
			<-ctx.Done()
			if waited := time.Since(sent); waited < 20*time.Millisecond || waited > 21*time.Millisecond {
				t.Fatalf("ended %v after the send, want 20 ms", waited)
			}
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				t.Fatalf("cause %v", context.Cause(ctx))
			}
			if got := end(); !got.Equal(sent) {
				t.Fatalf("end reports the send at %v, want %v", got, sent)
			}

			// A call that returns unsent reports no send, and a Sent after
			// its return changes nothing.
			ctx, end = c.start(time.Now(), 0)
			if got := end(); !got.IsZero() {
				t.Fatalf("an unsent call reports a send at %v", got)
			}
			Sent(ctx)
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Fatalf("after the call: %v", ctx.Err())
			}
		})
	})
}

// Without a timeout the clock only records the send; and when the stage
// stops, calls end whether or not they were sent.
func TestAttemptContextFromSendStops(t *testing.T) {
	clocks(t, func(t *testing.T, newClock func(context.Context, time.Duration) *attemptClock) {
		for _, timeout := range []time.Duration{0, 20 * time.Millisecond} {
			synctest.Test(t, func(t *testing.T) {
				parent, stop := context.WithCancel(context.Background())
				c := newClock(parent, timeout)
				defer c.stop()
				unsent, endUnsent := c.start(time.Now(), 0)
				defer endUnsent()
				sent, endSent := c.start(time.Now(), 0)
				Sent(sent)
				at := time.Now()
				time.Sleep(10 * time.Millisecond)
				if _, ok := sent.Deadline(); ok != (timeout > 0) {
					t.Fatalf("timeout %v: sent call has a deadline: %v", timeout, ok)
				}
				stop()
				<-unsent.Done()
				<-sent.Done()
				if !errors.Is(unsent.Err(), context.Canceled) || !errors.Is(sent.Err(), context.Canceled) {
					t.Fatalf("timeout %v: after the stage stopped: unsent %v, sent %v", timeout, unsent.Err(), sent.Err())
				}
				if got := endSent(); !got.Equal(at) {
					t.Fatalf("timeout %v: send at %v, want %v", timeout, got, at)
				}
				synctest.Wait()
				late, endLate := c.start(time.Now(), 0)
				defer endLate()
				Sent(late)
				if late.Err() == nil {
					t.Fatalf("timeout %v: a call started after the stage stopped is not cancelled", timeout)
				}
			})
		}
	})
}

// Calls that wait different times before sending, some answering in time
// and some not: each slow one ends exactly its timeout after its own send
// (the queue, in send order, is in deadline order), no quick one ends
// early.
func TestAttemptContextFromSendMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), 30*time.Millisecond, true, nil)
		defer c.stop()
		errs := make(chan error, 200)
		for i := range 200 {
			go func() {
				ctx, end := c.start(time.Now(), 0)
				defer end()
				time.Sleep(time.Duration((i*37)%200) * time.Millisecond) // waits before the send, in no order
				Sent(ctx)
				sent := time.Now()
				if i%2 == 0 {
					time.Sleep(10 * time.Millisecond)
					errs <- ctx.Err()
					return
				}
				<-ctx.Done()
				if time.Since(sent) != 30*time.Millisecond || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					errs <- fmt.Errorf("call %d ended %v after its send (%v), want 30 ms", i, time.Since(sent), ctx.Err())
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

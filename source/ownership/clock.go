package ownership

import (
	"context"
	"time"
)

// Clock is the time a Balancer runs on (Config.Clock): its renewal
// intervals, the timeouts of its store calls, its self-fence deadline
// and its timers. The default is the system clock. Another clock lets
// the balancer's own code run in simulated time, for instance to learn
// how long hundreds of instances take to share thousands of partitions
// without waiting for it (internal/ownsim does this).
//
// A simulated clock must know every goroutine that waits on it, so the
// balancer starts its renewal loop through Go, and waits only through
// Wait.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f on a goroutine of its own once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// Wait returns true once d has passed, or false as soon as wake
	// receives a value (or is closed) or ctx ends. A negative d never
	// passes; a nil wake never receives.
	Wait(ctx context.Context, d time.Duration, wake <-chan struct{}) bool
	// WithTimeout returns a copy of ctx that ends once d has passed by
	// this clock (its Err is then context.DeadlineExceeded), or when ctx
	// ends or cancel is called.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// Go runs f on a goroutine of its own.
	Go(f func())
}

// Timer is a pending call of a Clock's AfterFunc.
type Timer interface {
	// Stop prevents the call, if it has not happened yet, and reports
	// whether it did.
	Stop() bool
	// Reset makes the call happen d from now, whether or not it happened
	// or was stopped, and reports whether it was pending.
	Reset(d time.Duration) bool
}

// SystemClock is the system's clock (time.Now, with its monotonic
// reading): the default of Config.Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Wait waits on a time.Timer, wake and ctx.
func (SystemClock) Wait(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	var after <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		after = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return false
	case <-after:
		return true
	}
}

// WithTimeout is context.WithTimeout.
func (SystemClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Go runs f with the go statement.
func (SystemClock) Go(f func()) { go f() }

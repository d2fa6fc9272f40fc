package flow

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// adaptiveTimeout is the attempt timeout of a stage whose retry policy has
// a TimeoutFactor: factor times the p99 latency of the stage's recent
// calls, never below floor (the policy's AttemptTimeout, or CallTimeout)
// and never above ceiling (the policy's LongestAttemptTimeout: its
// MaxAttemptTimeout, or its MaxElapsed).
//
// Every timeoutWindow calls it takes the window's p99 and moves the
// timeout: up at once to factor x p99, or down, by at most half in one
// window, so that one quick window does not cut the timeout of a service
// whose calls are turning slow. A call that timed out is observed at its latency,
// which is its timeout: while calls keep timing out, the p99 is the
// timeout and the next window's timeout is factor times it — it grows
// until the calls fit, up to the ceiling.
type adaptiveTimeout struct {
	factor         float64
	floor, ceiling time.Duration

	current atomic.Int64 // the timeout now, in nanoseconds

	mu     sync.Mutex
	window []time.Duration
}

// timeoutWindow is the calls per decision. Its p99 is its slowest call: a
// lone straggler raises the timeout for a window (harmless: the timeout
// is a bound, not a target), while a service that turns slow is followed
// within 64 calls, before many attempts time out.
const timeoutWindow = 64

func newAdaptiveTimeout(factor float64, floor, ceiling time.Duration) *adaptiveTimeout {
	t := &adaptiveTimeout{factor: factor, floor: floor, ceiling: max(ceiling, floor), window: make([]time.Duration, 0, timeoutWindow)}
	t.current.Store(int64(floor))
	return t
}

// timeout is the timeout of an attempt that may last at most limit (what
// is left of its message's budget; 0: no limit; negative: none left),
// never below the floor: an attempt gets at least what a fixed timeout
// would give it.
func (t *adaptiveTimeout) timeout(limit time.Duration) time.Duration {
	d := time.Duration(t.current.Load())
	if limit != 0 {
		d = min(d, limit)
	}
	return max(d, t.floor)
}

// most is the longest timeout an attempt that may last at most limit can
// be given however the timeout rises (timeout with the timeout at its
// ceiling).
func (t *adaptiveTimeout) most(limit time.Duration) time.Duration {
	d := t.ceiling
	if limit != 0 {
		d = min(d, limit)
	}
	return max(d, t.floor)
}

// observe records a call's latency and, at the end of a window, moves the
// timeout. timedOut is the timeout of a call that timed out (0 for one
// that returned): the window's p99, its slowest call, is then at least
// that, and the timeout rises to factor times it at once rather than at
// the window's end, so that a service turning slow is followed before its
// messages' attempts run out. Calls timed out with an older, shorter
// timeout do not raise it further.
func (t *adaptiveTimeout) observe(lat, timedOut time.Duration) {
	if timedOut > 0 {
		t.raise(timedOut)
	}
	t.mu.Lock()
	t.window = append(t.window, lat)
	if len(t.window) < timeoutWindow {
		t.mu.Unlock()
		return
	}
	slices.Sort(t.window)
	p99 := t.window[len(t.window)*99/100]
	t.window = t.window[:0]
	t.mu.Unlock()
	want := time.Duration(t.factor * float64(p99))
	cur := time.Duration(t.current.Load())
	next := max(want, cur/2)
	t.current.Store(int64(min(max(next, t.floor), t.ceiling)))
}

// raise sets the timeout to factor times timedOut, a call's timeout that
// ran out, if that is more (up to the ceiling): the service did not
// answer within it.
func (t *adaptiveTimeout) raise(timedOut time.Duration) {
	want := min(time.Duration(t.factor*float64(timedOut)), t.ceiling)
	for {
		cur := t.current.Load()
		if int64(want) <= cur || t.current.CompareAndSwap(cur, int64(want)) {
			return
		}
	}
}

package delivery

import (
	"time"

	"github.com/sluice-streams/sluice/flow"
)

// MinStaleAfter is the least SchedulerConfig.StaleAfter with which a
// recorded step's call (the drone booking, with Steps) can run for the
// whole attempt timeout of retry (DefaultRetry if nil).
//
// A copy's call is cut StaleAfter/2 after its mark, so that no call is in
// flight when another copy finds the mark stale and asks the service; and
// it is made only while at least StaleAfter/4 of that is left (a step
// store slower to answer Begin renews the mark first). So a call is sure
// of StaleAfter/4: below 4 × the attempt timeout (its longest, when it
// follows the service's latency: flow.RetryPolicy.LongestAttemptTimeout), the cut, not the
// attempt timeout, ends a slow call, and its outcome is unknown — the
// request waits, parked, for its mark to turn stale and the service to
// be asked. Without an attempt timeout the cut is the call's only bound.
// Either way StaleAfter/4 is also what the step store has to answer
// Begin: MinStaleAfter is never under MinStaleAfterFloor.
func MinStaleAfter(retry *flow.RetryPolicy) time.Duration {
	p := DefaultRetry()
	if retry != nil {
		p = *retry
	}
	return max(MinStaleAfterFloor, 4*p.LongestAttemptTimeout())
}

// MinStaleAfterFloor is the least StaleAfter whatever the retry policy:
// it leaves the step store 250 ms to answer Begin before a call.
const MinStaleAfterFloor = time.Second

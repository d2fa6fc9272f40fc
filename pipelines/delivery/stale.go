package delivery

import (
	"fmt"
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

// CheckStaleAfter returns a *StaleAfterError if staleAfter is under
// MinStaleAfter(retry), nil otherwise. NewScheduler refuses such a
// StaleAfter when it records steps.
func CheckStaleAfter(staleAfter time.Duration, retry *flow.RetryPolicy) error {
	p := DefaultRetry()
	if retry != nil {
		p = *retry
	}
	least := MinStaleAfter(&p)
	if staleAfter >= least {
		return nil
	}
	return &StaleAfterError{StaleAfter: staleAfter, Least: least, LongestAttempt: p.LongestAttemptTimeout()}
}

// StaleAfterError says that a StaleAfter is too short for the recorded
// steps' calls: Least is MinStaleAfter of the retry policy, whose
// longest attempt timeout is LongestAttempt.
type StaleAfterError struct {
	StaleAfter, Least, LongestAttempt time.Duration
}

// Floored reports whether Least is MinStaleAfterFloor, what the step store
// needs, rather than 4 × LongestAttempt.
func (e *StaleAfterError) Floored() bool { return 4*e.LongestAttempt < MinStaleAfterFloor }

func (e *StaleAfterError) Error() string {
	if e.Floored() {
		return fmt.Sprintf("StaleAfter %v: must be at least %v: a recorded step's call is made only while a quarter of "+
			"StaleAfter is left after the step store marked it started, which leaves the store that long to answer", e.StaleAfter, e.Least)
	}
	return fmt.Sprintf("StaleAfter %v: must be at least %v, 4 × the %v longest attempt timeout of the retry policy: a recorded "+
		"step's call is cut at half of StaleAfter after its mark, and made only while a quarter is left; shorter, the cut ends "+
		"slow calls before their attempt timeout does and leaves their outcome unknown (the request waits for its mark to "+
		"turn stale and the service to be asked)", e.StaleAfter, e.Least, e.LongestAttempt)
}

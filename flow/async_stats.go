package flow

import (
	"github.com/sluice-streams/sluice/stream"
)

// reasons are the retry reasons in the order of AsyncStats.Retries.
var reasons = [...]stream.Reason{stream.ReasonThrottled, stream.ReasonTimeout, stream.ReasonConnection,
	stream.ReasonBreakerOpen, stream.ReasonOther}

func reasonIndex(r stream.Reason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return len(reasons) - 1
}

// AsyncStats is a snapshot of an async stage.
type AsyncStats struct {
	// InFlight is the number of calls running; Waiting the messages held for
	// a call slot, a key, or in the reorder buffer; Limit the current cap on
	// calls in flight (parallelism, or lower with a limiter).
	InFlight, Waiting, Limit int64
	// Calls counts finished calls, Failed those that returned an error
	// (timeouts included), Timeouts those cut by CallTimeout. Refused
	// counts attempts the Breaker refused: no call was made, so they are
	// neither calls nor failed calls.
	Calls, Failed, Timeouts, Refused int64
	// Skipped counts messages that needed no call (SkipCall).
	Skipped int64
	// Delayed is the number of messages waiting for their next attempt.
	Delayed int64
	// Retries counts retries scheduled, by reason.
	Retries map[stream.Reason]int64
	// Exhausted counts messages whose transient failure outlasted the retry
	// policy; NoBudget retries refused by the retry budget.
	Exhausted, NoBudget int64
	// Levels has one entry per level of priority with Lanes (nil without).
	Levels []LaneStats
}

// Stats returns a snapshot of the stage's counters.
func (a *Async[In, Out]) Stats() AsyncStats {
	st := AsyncStats{
		InFlight: a.inFlight.Load(), Waiting: a.waiting.Load(), Limit: a.limit.Load(),
		Calls: a.calls.Load(), Failed: a.failed.Load(), Timeouts: a.timeouts.Load(), Refused: a.refused.Load(), Skipped: a.skipped.Load(),
		Delayed: a.delayed.Load(), Exhausted: a.exhausted.Load(), NoBudget: a.noBudget.Load(),
		Retries: map[stream.Reason]int64{},
	}
	for i, r := range reasons {
		st.Retries[r] = a.retries[i].Load()
	}
	if a.o.lanes != nil && a.o.lanes.counters != nil {
		st.Levels = a.o.lanes.counters.stats(a.o.laneDrain, a.o.laneBacklog)
	}
	return st
}

// callCounts accumulates a worker's counters between two flushes, so that
// workers do not contend on shared atomics once per call.
type callCounts struct{ calls, failed, timeouts, refused int64 }

func (c *callCounts) flush(a interface {
	add(c callCounts)
}) {
	if *c != (callCounts{}) { // refusals alone too: a breaker open for long makes no calls
		a.add(*c)
		*c = callCounts{}
	}
}

func (a *Async[In, Out]) add(c callCounts) {
	if c.calls > 0 {
		a.calls.Add(c.calls)
	}
	if c.failed > 0 {
		a.failed.Add(c.failed)
	}
	if c.timeouts > 0 {
		a.timeouts.Add(c.timeouts)
	}
	if c.refused > 0 {
		a.refused.Add(c.refused)
	}
}

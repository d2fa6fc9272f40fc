package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// checkStaleAfter refuses a -stale-after too short for the drone step's
// calls under the retry policy the scheduler runs with: retry, named
// policy, or its own if nil (see delivery.MinStaleAfter).
func checkStaleAfter(staleAfter time.Duration, retry *flow.RetryPolicy, policy string) error {
	var short *delivery.StaleAfterError
	if !errors.As(delivery.CheckStaleAfter(staleAfter, retry), &short) {
		return nil
	}
	if short.Floored() {
		return fmt.Errorf("-stale-after %v: must be at least %v: a drone call is made only while a quarter of -stale-after is "+
			"left after the step store marked it started, which leaves the store that long to answer", staleAfter, short.Least)
	}
	name := "the scheduler's own retry policy"
	if retry != nil {
		name = fmt.Sprintf("retry policy %q", policy)
	}
	return fmt.Errorf("-stale-after %v: must be at least %v, 4 × the %v longest attempt timeout of %s: a drone call is cut at half "+
		"of -stale-after after its mark, and made only while a quarter is left; shorter, the cut ends slow calls before their "+
		"attempt timeout does, and leaves their outcome unknown (the request waits to look it up at the drone service)",
		staleAfter, short.Least, short.LongestAttempt, name)
}

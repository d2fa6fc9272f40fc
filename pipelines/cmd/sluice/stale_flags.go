package main

import (
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// checkStaleAfter refuses a -stale-after too short for the drone step's
// calls under the retry policy the scheduler runs with: retry, named
// policy, or its own if nil (see delivery.MinStaleAfter).
func checkStaleAfter(staleAfter time.Duration, retry *flow.RetryPolicy, policy string) error {
	least := delivery.MinStaleAfter(retry)
	if staleAfter >= least {
		return nil
	}
	p, name := delivery.DefaultRetry(), "the scheduler's own retry policy"
	if retry != nil {
		p, name = *retry, fmt.Sprintf("retry policy %q", policy)
	}
	longest := p.LongestAttemptTimeout()
	if 4*longest < delivery.MinStaleAfterFloor {
		return fmt.Errorf("-stale-after %v: must be at least %v: a drone call is made only while a quarter of -stale-after is "+
			"left after the step store marked it started, which leaves the store that long to answer", staleAfter, least)
	}
	return fmt.Errorf("-stale-after %v: must be at least %v, 4 × the %v longest attempt timeout of %s: a drone call is cut at half "+
		"of -stale-after after its mark, and made only while a quarter is left; shorter, the cut ends slow calls before their "+
		"attempt timeout does, and leaves their outcome unknown (the request waits to look it up at the drone service)",
		staleAfter, least, longest, name)
}

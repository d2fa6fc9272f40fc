package delivery

import (
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/flow"
)

// DefaultRetry is the steps' retry policy unless SchedulerConfig.Retry
// says otherwise: flow.Interactive with up to 5 attempts, retried within
// 400 ms, which fits the 500 ms latency budget; each attempt's timeout
// follows the service's latency (TimeoutFactor 3: three times its recent
// p99, 200 ms at least, up to 1 s, past the 400 ms if the service needs
// it), so that a service that slows down — or a saturated machine's, whose
// answers take longer than the budget — slows the scheduler instead of
// having its calls cut and their requests parked. HTTP 408, 429, 500,
// 502, 503 and 504 are transient: every step is idempotent (PUT by
// delivery id) or recorded (StepStore).
func DefaultRetry() flow.RetryPolicy {
	p := flow.Interactive()
	p.MaxAttempts = 5
	p.AttemptTimeout = 200 * time.Millisecond
	p.MaxElapsed = 400 * time.Millisecond
	p.TimeoutFactor = 3
	p.MaxAttemptTimeout = time.Second
	return p
}

// CheckRetry reports why p cannot be the steps' policy: it is invalid
// (flow.RetryPolicy.Validate), or it has no attempt_timeout — a hung
// service would then hold its calls' slots, and their requests, until the
// HTTP client's own timeout, and no retry could be weighed against the
// budget.
func CheckRetry(p flow.RetryPolicy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.AttemptTimeout <= 0 {
		return fmt.Errorf("attempt_timeout: must be positive for the scheduler's calls, got %v", p.AttemptTimeout)
	}
	return nil
}

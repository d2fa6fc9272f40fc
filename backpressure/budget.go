package backpressure

import (
	"sync"
	"sync/atomic"
)

// RetryBudget allows retries only while they stay under a ratio of the
// requests made, so that an outage does not multiply the load on a
// dependency (the SRE book's per-client retry budget of 10%; gRPC's retry
// throttling and Envoy's retry budget work alike). Each first attempt
// deposits Ratio tokens, each retry takes one; the bucket holds at most
// Burst tokens and starts full. Use one budget per dependency, shared by
// every stage that calls it.
type RetryBudget struct {
	ratio int64 // thousandths of a retry per request: exact arithmetic
	burst int64 // in thousandths

	mu        sync.Mutex
	tokens    int64 // in thousandths
	exhausted atomic.Int64
	allowed   atomic.Int64
}

// NewRetryBudget returns a budget of ratio retries per request (0.1 = 10%)
// with a reserve of burst retries.
func NewRetryBudget(ratio float64, burst int) (*RetryBudget, error) {
	if ratio <= 0 || ratio > 1 {
		return nil, configError("retry budget", "ratio", "must be in (0, 1], got %v", ratio)
	}
	if burst < 1 {
		return nil, configError("retry budget", "burst", "must be at least 1, got %d", burst)
	}
	r := int64(ratio*1000 + 0.5)
	return &RetryBudget{ratio: max(1, r), burst: int64(burst) * 1000, tokens: int64(burst) * 1000}, nil
}

// Request records a first attempt.
func (b *RetryBudget) Request() {
	b.mu.Lock()
	b.tokens = min(b.burst, b.tokens+b.ratio)
	b.mu.Unlock()
}

// TryRetry takes a token for a retry and reports whether there was one.
func (b *RetryBudget) TryRetry() bool {
	b.mu.Lock()
	ok := b.tokens >= 1000
	if ok {
		b.tokens -= 1000
	}
	b.mu.Unlock()
	if ok {
		b.allowed.Add(1)
	} else {
		b.exhausted.Add(1)
	}
	return ok
}

// BudgetStats is a snapshot of a retry budget.
type BudgetStats struct {
	// Allowed counts retries the budget granted; Exhausted retries it
	// refused for want of budget.
	Allowed, Exhausted int64
}

// Stats returns the budget's counters.
func (b *RetryBudget) Stats() BudgetStats {
	return BudgetStats{Allowed: b.allowed.Load(), Exhausted: b.exhausted.Load()}
}

package flow

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Strategy is how the wait between attempts grows.
type Strategy string

const (
	// Exponential waits BaseDelay, 2x, 4x, ... up to MaxDelay: background
	// work, where backing off matters more than latency.
	Exponential Strategy = "exponential"
	// Incremental waits BaseDelay, BaseDelay+Increment, +2 Increments, ...
	Incremental Strategy = "incremental"
	// Regular waits BaseDelay every time.
	Regular Strategy = "regular"
	// Immediate retries once, at once, and never more: for the one glitch
	// worth retrying without a pause.
	Immediate Strategy = "immediate"
)

// Jitter is how the wait is randomized so that many clients do not retry
// in lock-step (the AWS analysis "Exponential Backoff and Jitter": full
// jitter does the least work in total).
type Jitter string

const (
	// NoJitter waits the delay as the strategy computes it.
	NoJitter Jitter = "none"
	// FullJitter waits a uniform random time in [0, delay].
	FullJitter Jitter = "full"
	// EqualJitter waits delay/2 plus a uniform random time in [0, delay/2].
	EqualJitter Jitter = "equal"
	// DecorrelatedJitter waits a uniform random time in [BaseDelay,
	// 3 x the previous wait], capped at MaxDelay.
	DecorrelatedJitter Jitter = "decorrelated"
)

// RetryPolicy says whether and when a failed call is tried again. Only
// transient failures (stream.Classify) are retried, never more than
// MaxAttempts calls in all, and never past MaxElapsed after the first
// attempt started: attempts, waits and attempt timeouts all count, so the
// end-to-end latency budget holds whatever the service does.
//
// The zero RetryPolicy is not valid (MaxAttempts 0, no strategy): start
// from Background or Interactive. In JSON (the retry-policy file, see
// LoadRetryPolicies) fields have the names of their tags and durations are
// strings in Go's form ("250ms", "1m30s"); see MarshalJSON.
//
// The defaults the fields state are their values in Background and
// Interactive, which a policy of a file starts from (LoadRetryPolicies).
type RetryPolicy struct {
	// Strategy is how the wait grows (default Exponential).
	Strategy Strategy `json:"strategy"`
	// Jitter randomizes each wait (default FullJitter).
	Jitter Jitter `json:"jitter"`
	// MaxAttempts counts calls, the first included (1: no retry; default
	// 8 in Background, 3 in Interactive).
	MaxAttempts int `json:"max_attempts"`
	// BaseDelay is the first wait (default 100ms in Background, 50ms in
	// Interactive); Increment what Incremental adds each time (default
	// 0); MaxDelay caps any wait (0: no cap; default 30s in Background,
	// 250ms in Interactive). A Retry-After longer than MaxDelay is not
	// cut to it: see HonorRetryAfter.
	BaseDelay time.Duration `json:"base_delay"`
	Increment time.Duration `json:"increment"`
	MaxDelay  time.Duration `json:"max_delay"`
	// AttemptTimeout bounds each call (0: no bound; default 0 in
	// Background, 500ms in Interactive), counted as CallTimeout is: from
	// the call's start, or from its send in a stage with TimeoutFromSend.
	// A stage's CallTimeout wins over it, whatever the options' order
	// (MapAsync logs a warning when the two differ).
	AttemptTimeout time.Duration `json:"attempt_timeout"`
	// MaxElapsed bounds the whole: no retry is scheduled that could end
	// after it (0: no bound but MaxAttempts; default 5m in Background, 2s
	// in Interactive). It counts from the first attempt's start, with
	// TimeoutFromSend too: it is the latency the message's sender sees,
	// and the earlier attempts' waits before sending count against it (the
	// next attempt's own wait, unknown when the retry is scheduled, does
	// not).
	MaxElapsed time.Duration `json:"max_elapsed"`
	// HonorRetryAfter waits at least what the service asked (429/503
	// Retry-After), jittered upward by up to 20% (at most to MaxDelay) so
	// that clients told the same time do not wake together (default true).
	// A Retry-After that does not fit the retries — longer than MaxDelay,
	// or leaving the next attempt no time within MaxElapsed — ends them at
	// once: an attempt before the time asked would only meet the same
	// refusal and spend the attempts. The message then fails with
	// stream.Failure.NotBefore at the end of the Retry-After, for a parking
	// (sink/kafka's Backoff) to replay it then. Without it, a Retry-After
	// is ignored.
	HonorRetryAfter bool `json:"honor_retry_after"`
	// TransientStatus lists the HTTP statuses taken as transient (retried,
	// and parked once the retries run out), the others being permanent
	// (default DefaultTransientStatus: 408, 429, 500, 502, 503 and 504;
	// empty: stream.Classify's, without 500). Errors without a status
	// (timeouts, refused connections, errors marked transient) are
	// classified as stream.Classify does. See Classify.
	TransientStatus Statuses `json:"transient_status"`
	// TimeoutFactor, if positive, makes each attempt's timeout follow the
	// service: TimeoutFactor times the p99 latency of the stage's recent
	// calls (a call that timed out counts at its timeout and raises it at
	// once: the calls then in flight are given the raised timeout, from
	// their own start, rather than cut at the one that proved too short),
	// never less than AttemptTimeout and never more than
	// MaxAttemptTimeout, or, without it, what is left of MaxElapsed. A
	// service that slows down then slows the stage (its messages wait, its
	// source lags) instead of timing out every call. 0 (the default): every
	// attempt's timeout is AttemptTimeout. Needs AttemptTimeout and
	// MaxElapsed.
	TimeoutFactor float64 `json:"timeout_factor"`
	// MaxAttemptTimeout, with TimeoutFactor, is the longest an attempt's
	// timeout grows to, past what is left of MaxElapsed if the service
	// needs it (0, the default: what is left of MaxElapsed). MaxElapsed
	// then bounds the retries only — one is scheduled only if it can end
	// within MaxElapsed at AttemptTimeout — and not the attempt under
	// way: a service whose answers take longer than the budget (a
	// saturated machine's, or one slowed down) is waited for, up to
	// MaxAttemptTimeout, rather than having every call cut at the
	// budget's end and failed, the work it did for it lost. Set it to
	// the longest a call may hold its slot (and its message) when the
	// service is slow; it must not be under AttemptTimeout. Without
	// TimeoutFactor it has no effect: every attempt's timeout is then
	// AttemptTimeout.
	MaxAttemptTimeout time.Duration `json:"max_attempt_timeout"`
}

// LongestAttemptTimeout is the longest timeout p gives an attempt:
// AttemptTimeout, or, when the timeout follows the service
// (TimeoutFactor), MaxAttemptTimeout, or MaxElapsed without it. 0: no
// timeout.
func (p RetryPolicy) LongestAttemptTimeout() time.Duration {
	if p.TimeoutFactor <= 0 {
		return p.AttemptTimeout
	}
	if p.MaxAttemptTimeout > 0 {
		return max(p.AttemptTimeout, p.MaxAttemptTimeout)
	}
	return max(p.AttemptTimeout, p.MaxElapsed)
}

// Background is the default policy for background work: exponential
// backoff with full jitter, 8 attempts, 100 ms up to 30 s between them,
// within 5 minutes; HTTP 408, 429, 500, 502, 503 and 504 are transient.
func Background() RetryPolicy {
	return RetryPolicy{Strategy: Exponential, Jitter: FullJitter, MaxAttempts: 8,
		BaseDelay: 100 * time.Millisecond, MaxDelay: 30 * time.Second,
		MaxElapsed: 5 * time.Minute, HonorRetryAfter: true, TransientStatus: DefaultTransientStatus()}
}

// Interactive is the default policy for work someone waits for: 3 fast
// attempts of at most 500 ms each (AttemptTimeout; a stage's CallTimeout
// wins over it), 50 to 250 ms apart with full jitter, within 2 seconds;
// HTTP 408, 429, 500, 502, 503 and 504 are transient.
func Interactive() RetryPolicy {
	return RetryPolicy{Strategy: Exponential, Jitter: FullJitter, MaxAttempts: 3,
		BaseDelay: 50 * time.Millisecond, MaxDelay: 250 * time.Millisecond,
		AttemptTimeout: 500 * time.Millisecond, MaxElapsed: 2 * time.Second, HonorRetryAfter: true,
		TransientStatus: DefaultTransientStatus()}
}

// Validate reports every bad field, by its JSON name.
func (p RetryPolicy) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	switch p.Strategy {
	case Exponential, Incremental, Regular:
	case Immediate:
		if p.MaxAttempts > 2 {
			bad("max_attempts", "an immediate strategy retries at most once, so at most 2 attempts, got %d", p.MaxAttempts)
		}
	default:
		bad("strategy", "unknown strategy %q (want exponential, incremental, regular or immediate)", p.Strategy)
	}
	switch p.Jitter {
	case NoJitter, FullJitter, EqualJitter, DecorrelatedJitter:
	default:
		bad("jitter", "unknown jitter %q (want none, full, equal or decorrelated)", p.Jitter)
	}
	if p.MaxAttempts < 1 {
		bad("max_attempts", "must be at least 1, got %d", p.MaxAttempts)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"base_delay", p.BaseDelay}, {"increment", p.Increment}, {"max_delay", p.MaxDelay},
		{"attempt_timeout", p.AttemptTimeout}, {"max_elapsed", p.MaxElapsed}, {"max_attempt_timeout", p.MaxAttemptTimeout}} {
		if d.v < 0 {
			bad(d.name, "must not be negative, got %v", d.v)
		}
	}
	if p.Strategy != Immediate && p.MaxAttempts > 1 && p.BaseDelay == 0 {
		if p.Strategy == "" {
			bad("base_delay", "must be positive (or the strategy immediate) to retry")
		} else {
			bad("base_delay", "must be positive for the %s strategy", p.Strategy)
		}
	}
	if p.MaxDelay > 0 && p.MaxDelay < p.BaseDelay {
		bad("max_delay", "%v is below base_delay %v", p.MaxDelay, p.BaseDelay)
	}
	switch {
	case p.MaxElapsed > 0 && p.AttemptTimeout > p.MaxElapsed:
		bad("max_elapsed", "%v is shorter than attempt_timeout %v: no attempt could end within it", p.MaxElapsed, p.AttemptTimeout)
	case p.MaxElapsed > 0 && p.MaxAttempts > 1 && p.Strategy != Immediate && p.AttemptTimeout+p.BaseDelay > p.MaxElapsed:
		bad("max_elapsed", "%v leaves no room for a retry (attempt_timeout %v plus base_delay %v): raise it, or set max_attempts to 1",
			p.MaxElapsed, p.AttemptTimeout, p.BaseDelay)
	}
	switch {
	case p.TimeoutFactor < 0 || math.IsNaN(p.TimeoutFactor) || math.IsInf(p.TimeoutFactor, 0):
		bad("timeout_factor", "must be a positive number, or 0 for a fixed attempt_timeout; got %v", p.TimeoutFactor)
	case p.TimeoutFactor > 1000:
		bad("timeout_factor", "%v is more than 1000 times the service's p99: use a number like 3", p.TimeoutFactor)
	case p.TimeoutFactor > 0 && p.TimeoutFactor < 1:
		bad("timeout_factor", "%v would time out calls faster than the service's own p99: use 1 or more (3 is typical)", p.TimeoutFactor)
	case p.TimeoutFactor > 0 && (p.AttemptTimeout <= 0 || p.MaxElapsed <= 0):
		bad("timeout_factor", "needs attempt_timeout (the least timeout) and max_elapsed (the most), got %v and %v",
			p.AttemptTimeout, p.MaxElapsed)
	}
	if p.TimeoutFactor > 0 && p.MaxAttemptTimeout > 0 && p.MaxAttemptTimeout < p.AttemptTimeout {
		bad("max_attempt_timeout", "%v is below attempt_timeout %v, the least timeout: raise it too", p.MaxAttemptTimeout, p.AttemptTimeout)
	}
	// A status below 400 never reaches the policy as a failure: listing
	// one is a typo (200 for 500) that would leave the meant code out.
	if cs := p.TransientStatus.Codes(); len(cs) > 0 && cs[0] < 400 {
		bad("transient_status", "%d is not a failure (statuses 400 to 599 can be transient)", cs[0])
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// Delay returns the wait before attempt number next (2 for the first
// retry), given the previous wait and what the service asked for, capped
// at MaxDelay (a stage does not retry at all when retryAfter is longer:
// see HonorRetryAfter). rnd returns uniform numbers in [0, 1).
func (p RetryPolicy) Delay(next int, prev, retryAfter time.Duration, rnd func() float64) time.Duration {
	if p.Strategy == Immediate {
		return 0
	}
	base, maxD := p.BaseDelay, p.MaxDelay
	if maxD == 0 {
		maxD = time.Duration(math.MaxInt64)
	}
	n := next - 1 // retries so far, this one included
	var d time.Duration
	switch p.Strategy {
	case Exponential:
		f := math.Pow(2, float64(n-1))
		if f*float64(base) >= float64(maxD) {
			d = maxD
		} else {
			d = time.Duration(f * float64(base))
		}
	case Incremental:
		d = base + time.Duration(n-1)*p.Increment
	case Regular:
		d = base
	}
	d = min(d, maxD)
	switch p.Jitter {
	case FullJitter:
		d = time.Duration(rnd() * float64(d))
	case EqualJitter:
		d = d/2 + time.Duration(rnd()*float64(d/2))
	case DecorrelatedJitter:
		hi := max(base, 3*prev)
		d = min(maxD, base+time.Duration(rnd()*float64(hi-base)))
	}
	if p.HonorRetryAfter && retryAfter > 0 {
		ra := min(retryAfter, maxD)
		ra += time.Duration(rnd() * 0.2 * float64(ra))
		d = max(d, min(ra, maxD))
	}
	return d
}

// defaultRand is the jitter source: math/rand/v2's global generator is
// safe for concurrent use and seeded per process.
func defaultRand() float64 { return rand.Float64() }

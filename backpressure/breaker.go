package backpressure

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluice-streams/sluice/stream"
)

// BreakerConfig configures a Breaker. Zero fields take the defaults given.
type BreakerConfig struct {
	// Name names the dependency in errors and state changes (default "":
	// errors say "breaker" alone).
	Name string
	// Window is the rolling window over which failures are counted (default
	// 10s, in 10 buckets).
	Window time.Duration
	// MinRequests is how many calls the window must hold before the failure
	// ratio can open the breaker (default 20).
	MinRequests uint32
	// FailureRatio opens the breaker (default 0.5).
	FailureRatio float64
	// OpenFor is how long the breaker stays open the first time (default
	// 1s); each time a probe fails and it opens again, twice as long, up to
	// MaxOpenFor (default 1m).
	OpenFor, MaxOpenFor time.Duration
	// Probes is how many calls may probe a half-open breaker at once
	// (default 1).
	Probes uint32
	// OnStateChange, if set, is told of every transition, on the goroutine
	// of the call whose Allow or done caused it. In a flow.MapAsync stage a
	// panic in it fails that call's message. Default: nil, none is told.
	OnStateChange func(name string, from, to BreakerState)
}

// BreakerState is closed (calls flow), open (calls fail fast) or half-open
// (a few probes decide).
type BreakerState = gobreaker.State

// The breaker states.
const (
	Closed   = gobreaker.StateClosed
	HalfOpen = gobreaker.StateHalfOpen
	Open     = gobreaker.StateOpen
)

var (
	errCallFailed     = errors.New("call failed")
	errCallNotReached = errors.New("call did not reach the dependency")
)

// Outcome is what a call that a Breaker allowed came to (AllowCall).
type Outcome int

const (
	// Succeeded: the dependency answered; failures that say nothing of
	// its health (a rejected request) count as successes too.
	Succeeded Outcome = iota
	// Failed: the dependency failed the call.
	Failed
	// NotReached: the call never reached the dependency (it failed on a
	// precondition before being sent). It counts neither as a success nor
	// as a failure, and a half-open breaker's probe slot it held goes to
	// another call, without deciding anything.
	NotReached
)

// ErrBreakerOpen is wrapped by the error of a call the breaker refused.
var ErrBreakerOpen = errors.New("sluice: circuit breaker open")

// OpenError is returned for a refused call. It is transient and carries
// how long until the breaker lets a probe through, so a retry waits that
// long.
type OpenError struct {
	Name  string
	Until time.Duration
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("%v: %s (next probe in %v)", ErrBreakerOpen, e.Name, e.Until.Round(time.Millisecond))
}

// Unwrap returns ErrBreakerOpen.
func (e *OpenError) Unwrap() error { return ErrBreakerOpen }

// RetryAfter returns the time until the next probe.
func (e *OpenError) RetryAfter() time.Duration { return e.Until }

// TransientReason marks the refusal as transient, for the breaker
// (stream.TransientReasoner): the call may succeed once the breaker closes.
func (e *OpenError) TransientReason() stream.Reason { return stream.ReasonBreakerOpen }

// Breaker is a circuit breaker for one dependency, in two steps so that an
// asynchronous stage can ask before a call and report after it. It is
// sony/gobreaker (rolling window, failure ratio with a minimum of
// requests, limited half-open probes) with one addition: while the
// dependency stays down, each failed probe doubles the open time.
type Breaker struct {
	cfg BreakerConfig
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]

	mu      sync.Mutex
	reopens int
	// holdUntil (unix nanoseconds; 0: none) refuses probes until then,
	// beyond gobreaker's OpenFor. Atomic: every call reads it, and a closed
	// breaker must cost no lock of its own.
	holdUntil atomic.Int64

	transitions atomic.Int64
}

// NewBreaker returns a breaker.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	if cfg.Window == 0 {
		cfg.Window = 10 * time.Second
	}
	if cfg.MinRequests == 0 {
		cfg.MinRequests = 20
	}
	if cfg.FailureRatio == 0 {
		cfg.FailureRatio = 0.5
	}
	if cfg.OpenFor == 0 {
		cfg.OpenFor = time.Second
	}
	if cfg.MaxOpenFor == 0 {
		cfg.MaxOpenFor = time.Minute
	}
	if cfg.Probes == 0 {
		cfg.Probes = 1
	}
	component := "breaker"
	if cfg.Name != "" {
		component += " " + cfg.Name
	}
	switch {
	case cfg.Window < 0:
		return nil, configError(component, "Window", "must not be negative, got %v", cfg.Window)
	case cfg.OpenFor < 0 || cfg.MaxOpenFor < cfg.OpenFor:
		return nil, configError(component, "OpenFor", "need 0 < OpenFor <= MaxOpenFor, got OpenFor %v MaxOpenFor %v", cfg.OpenFor, cfg.MaxOpenFor)
	case cfg.FailureRatio <= 0 || cfg.FailureRatio > 1:
		return nil, configError(component, "FailureRatio", "must be in (0, 1], got %v", cfg.FailureRatio)
	}
	b := &Breaker{cfg: cfg}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         cfg.Name,
		MaxRequests:  cfg.Probes,
		Interval:     cfg.Window,
		BucketPeriod: cfg.Window / 10,
		Timeout:      cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			// Calls that did not reach the dependency count for nothing,
			// neither toward MinRequests nor in the ratio.
			n := c.Requests - min(c.TotalExclusions, c.Requests)
			return n >= cfg.MinRequests && float64(c.TotalFailures) >= cfg.FailureRatio*float64(n)
		},
		IsExcluded:    func(err error) bool { return err == errCallNotReached },
		OnStateChange: b.changed,
	})
	return b, nil
}

func (b *Breaker) changed(name string, from, to gobreaker.State) {
	b.transitions.Add(1)
	b.mu.Lock()
	switch {
	case from == HalfOpen && to == Open:
		b.reopens++
		open := b.cfg.OpenFor << min(b.reopens, 30)
		open = min(open, b.cfg.MaxOpenFor)
		b.holdUntil.Store(time.Now().Add(open).UnixNano())
	case to == Closed:
		b.reopens = 0
		b.holdUntil.Store(0)
	}
	b.mu.Unlock()
	if b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(name, from, to)
	}
}

// Allow asks to make a call. If the breaker refuses, it returns an
// *OpenError; otherwise the caller must call done with whether the call
// succeeded (failures that say nothing about the dependency's health, such
// as a rejected request, count as successes).
func (b *Breaker) Allow() (done func(success bool), err error) {
	d, err := b.AllowCall()
	if err != nil {
		return nil, err
	}
	return func(success bool) {
		if success {
			d(Succeeded)
		} else {
			d(Failed)
		}
	}, nil
}

// AllowCall is Allow whose done is told the call's Outcome, which may be
// that the call never reached the dependency (NotReached): a call function
// that found, before sending, that it could not call yet. Such a call is
// left out of the failure ratio, and the half-open probe slot it held is
// released for another call.
func (b *Breaker) AllowCall() (done func(Outcome), err error) {
	if h := b.holdUntil.Load(); h != 0 {
		if hold := time.Until(time.Unix(0, h)); hold > 0 {
			return nil, &OpenError{Name: b.cfg.Name, Until: hold}
		}
	}
	d, err := b.cb.Allow()
	if err != nil {
		return nil, &OpenError{Name: b.cfg.Name, Until: b.cfg.OpenFor}
	}
	return func(o Outcome) {
		switch o {
		case Succeeded:
			d(nil)
		case NotReached:
			d(errCallNotReached)
		default:
			d(errCallFailed)
		}
	}, nil
}

// State returns the breaker's state. A breaker held open past gobreaker's
// own open time (doubled after failed probes) reports Open.
func (b *Breaker) State() BreakerState {
	if h := b.holdUntil.Load(); h != 0 && time.Now().UnixNano() < h {
		return Open
	}
	return b.cb.State()
}

// BreakerStats is a snapshot of a breaker.
type BreakerStats struct {
	State BreakerState
	// Transitions counts state changes.
	Transitions int64
}

// Stats returns the breaker's state and counters.
func (b *Breaker) Stats() BreakerStats {
	return BreakerStats{State: b.State(), Transitions: b.transitions.Load()}
}

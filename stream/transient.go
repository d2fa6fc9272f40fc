package stream

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// Reason says why a call failed, for retry decisions, logs and metrics.
// The set is fixed so that metric labels stay bounded.
type Reason string

const (
	// ReasonThrottled: the service asked us to slow down (HTTP 429, 503
	// with Retry-After, or an error marked Throttled).
	ReasonThrottled Reason = "throttled"
	// ReasonTimeout: the call or a network operation timed out.
	ReasonTimeout Reason = "timeout"
	// ReasonConnection: the connection was refused, reset or broken.
	ReasonConnection Reason = "connection"
	// ReasonBreakerOpen: a circuit breaker refused the call.
	ReasonBreakerOpen Reason = "breaker_open"
	// ReasonOther: any other failure.
	ReasonOther Reason = "other"
)

// Classification is the verdict on an error: whether retrying may help,
// why it failed, and how long the service asked us to wait.
type Classification struct {
	Transient  bool
	Reason     Reason
	RetryAfter time.Duration
	// NotCalled says the attempt never reached the service (the error was
	// marked with NotCalled): it tells nothing of the service's health,
	// so a circuit breaker and a concurrency limiter leave it out.
	NotCalled bool
}

// transientError marks an error as transient.
type transientError struct {
	err        error
	reason     Reason
	retryAfter time.Duration
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as transient: retrying may succeed.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, reason: ReasonOther}
}

// Throttled marks err as the service asking to slow down, and to wait
// retryAfter (0: no preference) before the next attempt.
func Throttled(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, reason: ReasonThrottled, retryAfter: retryAfter}
}

// notCalledError marks an error as one returned before the service was
// called.
type notCalledError struct{ err error }

func (e *notCalledError) Error() string { return e.err.Error() }
func (e *notCalledError) Unwrap() error { return e.err }

// NotCalled marks err as returned before the service was called: the
// attempt never reached it (a precondition was not met yet, a store that
// guards the call answered late, another copy holds the call). Whether it
// is retried is up to err (Transient, Throttled and the rest, as before);
// but it says nothing of the service's health, so an asynchronous stage's
// circuit breaker counts it neither as a success nor as a failure (a
// half-open breaker's probe it held goes to another call), and its
// concurrency limiter and latency measures leave it out. A call that was
// made, and failed or was cut by a timeout, must not be marked.
func NotCalled(err error) error {
	if err == nil {
		return nil
	}
	return &notCalledError{err: err}
}

// IsNotCalled reports whether err was marked with NotCalled.
func IsNotCalled(err error) bool {
	var nc *notCalledError
	return errors.As(err, &nc)
}

// RetryAfterer is implemented by errors that carry the delay a service
// asked for (an HTTP Retry-After header, a breaker's remaining open time).
type RetryAfterer interface{ RetryAfter() time.Duration }

// TransientReasoner is implemented by errors that know they are transient
// and why (a circuit breaker's refusal, for one).
type TransientReasoner interface{ TransientReason() Reason }

// HTTPStatuser is implemented by errors that carry an HTTP status code.
type HTTPStatuser interface{ HTTPStatus() int }

// Classify is the one place that decides whether an error is transient.
// Transient: errors marked with Transient or Throttled (or implementing
// Temporary() bool that returns true), timeouts, refused, reset or broken
// connections, HTTP 408, 429, 502, 503 and 504 (429, and 503 with
// Retry-After, are throttling). Everything else is permanent.
//
// An HTTP 500 is permanent here, since nothing says the call can be
// repeated safely; a retry policy for idempotent calls says otherwise
// (ClassifyStatus with the statuses it lists).
func Classify(err error) Classification { return ClassifyStatus(err, DefaultTransientStatus) }

// DefaultTransientStatus reports whether Classify takes an HTTP status as
// transient: 408, 429, 502, 503 and 504.
func DefaultTransientStatus(code int) bool {
	switch code {
	case 408, 429, 502, 503, 504:
		return true
	}
	return false
}

// ClassifyStatus is Classify with transient deciding which HTTP statuses
// (of an error that is an HTTPStatuser and carries no transient marker of
// its own) are transient. The reason of a transient status is throttled
// for 429 and for 503 with Retry-After, timeout for 408 and 504, other
// for the rest. NotCalled is set for an error marked with NotCalled.
func ClassifyStatus(err error, transient func(code int) bool) Classification {
	c := classifyStatus(err, transient)
	if err != nil && IsNotCalled(err) {
		c.NotCalled = true
	}
	return c
}

func classifyStatus(err error, transient func(code int) bool) Classification {
	if err == nil {
		return Classification{}
	}
	var te *transientError
	if errors.As(err, &te) {
		c := Classification{Transient: true, Reason: te.reason, RetryAfter: te.retryAfter}
		if c.Reason == ReasonOther {
			c.Reason = reasonOf(err)
		}
		return c
	}
	var ra RetryAfterer
	retryAfter := time.Duration(0)
	if errors.As(err, &ra) {
		retryAfter = ra.RetryAfter()
	}
	var tr TransientReasoner
	if errors.As(err, &tr) {
		return Classification{Transient: true, Reason: tr.TransientReason(), RetryAfter: retryAfter}
	}
	var hs HTTPStatuser
	if errors.As(err, &hs) {
		switch code := hs.HTTPStatus(); {
		case !transient(code):
			return Classification{Reason: ReasonOther}
		case code == 429 || (code == 503 && retryAfter > 0):
			return Classification{Transient: true, Reason: ReasonThrottled, RetryAfter: retryAfter}
		case code == 408 || code == 504:
			return Classification{Transient: true, Reason: ReasonTimeout, RetryAfter: retryAfter}
		default:
			return Classification{Transient: true, Reason: ReasonOther, RetryAfter: retryAfter}
		}
	}
	if r := reasonOf(err); r != ReasonOther {
		return Classification{Transient: true, Reason: r, RetryAfter: retryAfter}
	}
	var tmp interface{ Temporary() bool }
	if errors.As(err, &tmp) && tmp.Temporary() {
		return Classification{Transient: true, Reason: ReasonOther, RetryAfter: retryAfter}
	}
	return Classification{Reason: ReasonOther}
}

// reasonOf recognizes timeouts and connection failures.
func reasonOf(err error) Reason {
	var to interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &to) && to.Timeout():
		return ReasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return ReasonConnection
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return ReasonConnection
	}
	if strings.Contains(err.Error(), errServerClosedIdle) {
		return ReasonConnection
	}
	return ReasonOther
}

// errServerClosedIdle is the text of net/http's unexported error for a
// request sent on a kept-alive connection that the server closed: the
// server never read it, so it is safe to send again.
const errServerClosedIdle = "http: server closed idle connection"

package stream

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// ErrDrainTimeout is returned by Run (wrapped) when the pipeline was
// cancelled and its stages did not finish their in-flight messages within
// the drain timeout. The messages they held stay unsettled and are replayed.
var ErrDrainTimeout = errors.New("sluice: drain timeout expired")

// ErrInvalid is wrapped by every configuration error that Run or a
// constructor reports.
var ErrInvalid = errors.New("sluice: invalid pipeline")

// StageError is an error that ended a stage, with the stage's name.
type StageError struct {
	Stage string
	Err   error
}

func (e *StageError) Error() string { return fmt.Sprintf("sluice: stage %q: %v", e.Stage, e.Err) }
func (e *StageError) Unwrap() error { return e.Err }

// ConfigError reports a bad argument to a stage, a component or the
// pipeline. Every constructor and option error of sluice is one.
type ConfigError struct {
	// Stage is the stage's name in the pipeline, or the component's when
	// it is built outside one ("kafka source", "breaker drones"); empty
	// for an option of the pipeline itself.
	Stage string
	// Argument is the argument, option or field that is wrong.
	Argument string
	// Reason says what is wrong with it.
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Stage == "" {
		return fmt.Sprintf("sluice: invalid pipeline option %s: %s", e.Argument, e.Reason)
	}
	return fmt.Sprintf("sluice: invalid %s of %q: %s", e.Argument, e.Stage, e.Reason)
}

// Is makes every ConfigError match ErrInvalid.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalid }

// PanicError is a panic recovered from user code. A panic in a per-message
// function becomes that message's failure; a panic elsewhere in a stage ends
// the pipeline with this error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// NewPanicError wraps a recovered value, capturing the current stack. Call it
// from the deferred function that recovered.
func NewPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Fatal marks err as one the pipeline cannot continue after. A per-message
// function that returns a Fatal error ends Run with it instead of
// dead-lettering the message, which stays unsettled for replay.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err: err}
}

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

// Failure is what a failed message becomes: the reason, where it happened
// and the value that failed. It travels as Message[Failure], keeping the
// original key, headers, position and settle handle, to the pipeline's
// failure stream; the dead letter that records it settles it.
type Failure struct {
	Stage string
	Err   error
	Value any
	// At is when the last attempt failed; FirstFailure when the first did.
	At, FirstFailure time.Time
	// Attempts counts the calls made for the message (0 when the stage does
	// not call anything).
	Attempts int
	// Transient says that the last error was transient: retries ran out,
	// the message is worth parking and replaying later rather than
	// sending to the failure queue.
	Transient bool
	// NotBefore is the earliest time a dependency asked for the message to
	// be tried again: the latest end of a Retry-After a throttling answer
	// gave, on any attempt (zero if none asked). A parking must not replay
	// it sooner, even when the last attempt failed for another reason (a
	// breaker the throttling opened).
	NotBefore time.Time
}

// Error returns the reason with the stage's name.
func (f Failure) Error() string { return fmt.Sprintf("stage %q: %v", f.Stage, f.Err) }

// Unwrap returns the reason.
func (f Failure) Unwrap() error { return f.Err }

func failureEnvelope[T any](m Message[T]) Message[Failure] {
	return WithValue(m, Failure{})
}

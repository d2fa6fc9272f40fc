package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// ErrOutcomeUnknown fails a request whose non-idempotent step was called
// and never answered: a worker crashed mid-call, or the attempt timed out or
// lost its connection. The service may have acted; calling again could act
// twice, so the request is compensated instead (the supervisor undoes the
// step, which is harmless if it had not acted).
//
// Found on a step that another copy of the request started (a duplicate, a
// copy replayed after a crash), it is transient: that copy may still finish
// the step, and a replay of this one then skips it. Found again after the
// request's parkings, it is compensated.
var ErrOutcomeUnknown = errors.New("outcome of a non-idempotent step is unknown; compensating rather than risking it twice")

// ErrStoreOutage ends the scheduler when the step store has been
// unreachable for longer than SchedulerConfig.MaxStoreOutage.
var ErrStoreOutage = errors.New("step store unreachable")

// stepFunc runs one step for a request and records on p what it learned
// (only when it succeeds).
type stepFunc func(ctx context.Context, p *Progress) error

// recorded wraps a step that is not idempotent. A request that completed it
// before (a replay) skips it and gets the recorded value back; one whose
// step another copy started fails with ErrOutcomeUnknown, transient (see
// there). Marks name the copy of the request (its *Progress) that wrote
// them, so a copy's own retry is not mistaken for a stranger's. Otherwise
// the call is marked started (in the same round trip as the read), made,
// and then recorded done — or, if the service answered that it did not
// act, the mark is cleared so that a retry may call again.
//
// The step store may be down for a while (see storeWaiter): the request
// waits for it, before the call and after it; a call that acted is never
// forgotten because its record could not be written at once.
func recorded(store StepStore, w *storeWaiter, step Step, fn stepFunc) stepFunc {
	return func(ctx context.Context, p *Progress) error {
		id := p.Request.ID
		if p.mark == "" {
			p.mark = strconv.FormatUint(rand.Uint64(), 36)
		}
		var rec StepState
		err := w.wait(ctx, false, func(ctx context.Context) (err error) {
			rec, err = store.Begin(ctx, id, step, p.mark)
			return err
		})
		if err != nil {
			// If the mark was written, it is this copy's: its retry knows
			// it called nothing.
			return err
		}
		if rec.Done {
			if step == StepDrone {
				p.DroneID = rec.Value
			}
			return nil
		}
		if rec.StartedBy != "" && rec.StartedBy != p.mark {
			return stream.Transient(fmt.Errorf("%s of %s, started by another copy of the request: %w", step, id, ErrOutcomeUnknown))
		}
		if err := ctx.Err(); err != nil {
			return stream.Transient(fmt.Errorf("%s of %s not called: %w", step, id, err))
		}
		callErr := fn(ctx, p)
		switch {
		case callErr == nil:
			value := ""
			if step == StepDrone {
				value = p.DroneID
			}
			return w.wait(ctx, true, func(ctx context.Context) error { return store.Record(ctx, id, step, value) })
		case outcomeUnknown(callErr):
			// Not wrapped with %w: the cause (a timeout) would read as
			// transient and be retried.
			return fmt.Errorf("%s of %s: %w (the call ended with: %v)", step, id, ErrOutcomeUnknown, callErr)
		default:
			if err := w.wait(ctx, true, func(ctx context.Context) error { return store.Abandon(ctx, id, step) }); err != nil {
				return err
			}
			return callErr
		}
	}
}

// outcomeUnknown reports whether a failed call may still have acted: it
// timed out, was cancelled or lost its connection after it was sent. A
// refused connection or an answer from the service (an error status, a
// throttle, a refusal) means it did not.
func outcomeUnknown(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	c := stream.Classify(err)
	return c.Transient && (c.Reason == stream.ReasonTimeout || c.Reason == stream.ReasonConnection)
}

// storeWaiter makes the recorded steps of one scheduler wait out a step
// store outage together: an operation that fails is tried again, backing
// off up to a second, until it succeeds; once the store has been failing
// for longer than the limit (from its first failure since it last
// answered), it gives up with a fatal error wrapping ErrStoreOutage, which
// stops the scheduler with the request unsettled (replayed after the
// restart).
type storeWaiter struct {
	limit time.Duration

	mu      sync.Mutex
	failing time.Time // first failure since the last success; zero: none
}

// wait runs op until it succeeds. after says the service was called
// already, so its record must be written even if the call's own context
// ended (its attempt's deadline): only the pipeline stopping ends the wait
// then. Before the call, a context that ends (the pipeline stopping, an
// attempt timing out) ends it with a transient error: nothing was called.
func (w *storeWaiter) wait(ctx context.Context, after bool, op func(ctx context.Context) error) error {
	backoff := 20 * time.Millisecond
	for {
		opCtx := ctx
		var cancel context.CancelFunc = func() {}
		if after {
			opCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		}
		err := op(opCtx)
		cancel()
		if err == nil {
			w.answered()
			return nil
		}
		if !stream.Classify(err).Transient {
			return err // the store answered: a record it cannot read, say
		}
		since := w.failed()
		if since > w.limit {
			return stream.Fatal(fmt.Errorf("%w for %v (MaxStoreOutage %v): %w", ErrStoreOutage, since.Round(time.Millisecond), w.limit, err))
		}
		stopping := ctx.Err() != nil && (!after || errors.Is(ctx.Err(), context.Canceled))
		if stopping {
			return stream.Transient(err)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			if !after || errors.Is(ctx.Err(), context.Canceled) {
				t.Stop()
				return stream.Transient(err)
			}
			<-t.C
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (w *storeWaiter) answered() {
	w.mu.Lock()
	w.failing = time.Time{}
	w.mu.Unlock()
}

// failed notes a failure and returns how long the store has been failing.
func (w *storeWaiter) failed() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.failing.IsZero() {
		w.failing = now
	}
	return now.Sub(w.failing)
}

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

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/stream"
)

// ErrOutcomeUnknown fails a request whose non-idempotent step was called
// and never answered: a worker crashed mid-call, or the attempt timed out or
// lost its connection. The service may have acted; calling again could act
// twice. It is transient while the call may still be in flight (the mark
// is younger than SchedulerConfig.StaleAfter): a later try, or a replay,
// looks again. Then, if the step has a lookup (the drone service's
// Booking), the service says what happened and the request goes on —
// recorded done, or called again; without one the request is compensated
// (the supervisor undoes the step, which is harmless if it had not acted).
var ErrOutcomeUnknown = errors.New("outcome of a non-idempotent step is unknown")

// ErrStoreOutage ends the scheduler when the step store has been
// unreachable for longer than SchedulerConfig.MaxStoreOutage.
var ErrStoreOutage = errors.New("step store unreachable")

// stepFunc runs one step for a request and records on p what it learned
// (only when it succeeds).
type stepFunc func(ctx context.Context, p *Progress) error

// stepLookup asks a step's service whether the step acted for p's request
// and with what value (the drone id).
type stepLookup func(ctx context.Context, p *Progress) (value string, done bool, err error)

// recordedStep is a step that is not idempotent, with its records.
type recordedStep struct {
	store      StepStore
	wait       *storeWaiter
	step       Step
	call       stepFunc
	lookup     stepLookup // nil: an unknown outcome is compensated
	staleAfter time.Duration
	clock      func() time.Time // this worker's clock (nil: time.Now); a mark's age is the store's
}

// waitStale is err, an unknown outcome, made transient with the wait until
// the mark is stale as its Retry-After: the retries within the budget give
// up at once, and the parking replays the request just after the mark
// turned stale, when the service can be asked, instead of at the parking's
// own pace (2, 4, 8, 16... s, which could pass that moment by half a
// minute).
func (r *recordedStep) waitStale(err error, left time.Duration) error {
	return stream.Throttled(err, max(left, 0)+staleMargin)
}

// staleMargin is how long after a mark turns stale its replay is due: the
// store's clock has millisecond steps, and the replay a little slack.
const staleMargin = 200 * time.Millisecond

// age is how old a started mark is, on the store's clock; a record that
// does not say is old.
func (r *recordedStep) age(rec StepState) time.Duration {
	if rec.Age < 0 {
		return r.staleAfter + time.Millisecond
	}
	return rec.Age
}

func (r *recordedStep) now() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// run runs the step once for p. A request that completed it before (a
// replay) skips it and gets the recorded value back. Otherwise the call
// is marked started by this copy of the request (its *Progress; in the
// same round trip as the read), made, and then recorded done — or, if
// the service answered that it did not act, the mark is cleared so that a
// retry may call again. A step that another copy started, or whose call
// by this copy ended without an answer, has an unknown outcome (see
// ErrOutcomeUnknown).
//
// The step store may be down for a while (see storeWaiter): the request
// waits for it, before the call and after it; a call that acted is never
// forgotten because its record could not be written at once.
//
// Every error returned before the call is made (a mark not stale yet,
// another copy's take-over, a store that answered late or not at all) is
// marked stream.NotCalled: it is retried or parked as before, but the
// step's breaker and limiter leave it out, since the service was not
// asked. A call that was made and failed, or was cut by its deadline, is
// the service's failure and is not marked.
func (r *recordedStep) run(ctx context.Context, p *Progress) error {
	id, step := p.Request.ID, r.step
	if p.mark == "" {
		p.mark = newMark()
	}
	var rec StepState
	// markedAt is, on this worker's clock, no later than the moment this
	// copy's mark was written, once it holds one: a fresh mark is written
	// after Begin is sent.
	markedAt, own := r.now(), false
	err := r.wait.wait(ctx, false, func(ctx context.Context) (err error) {
		markedAt = r.now()
		rec, err = r.store.Begin(ctx, id, step, p.mark)
		return err
	})
	if err != nil {
		return stream.NotCalled(err) // if the mark was written it is this copy's: its retry knows it called nothing
	}
	switch {
	case rec.Done:
		r.learned(p, rec.Value)
		return nil
	case rec.StartedBy != "" && (rec.StartedBy != p.mark || p.unknown == step):
		done, err := r.resolve(ctx, p, rec, &markedAt)
		if err != nil || done {
			return err
		}
	case rec.StartedBy != "":
		// This copy's own mark, from an attempt whose Begin got no answer
		// (or a retry after the service said no and the mark stayed): as
		// old, by the store's clock, as the store said when Begin was sent
		// at the latest.
		markedAt = markedAt.Add(-r.age(rec))
		own = true
	}
	// The call must end within StaleAfter/2 of the mark, whatever
	// the backend says about when it sent: another copy that finds the
	// mark older than StaleAfter asks the service and may call itself, so
	// no call of this copy may be in flight then. A mark too old to leave
	// the call time enough (Begin answered late, or an earlier attempt's
	// mark) is renewed first — unless another copy took it over, in which
	// case this copy does not call.
	deadline := markedAt.Add(r.staleAfter / 2)
	if deadline.Sub(r.now()) < r.staleAfter/4 {
		if !own {
			// Begin (or a take-over) wrote a fresh mark but answered late:
			// the retry reads it back, with its time, and renews it.
			return stream.NotCalled(stream.Transient(fmt.Errorf("%s of %s not called: the step store took %v to mark it started",
				step, id, r.now().Sub(markedAt).Round(time.Millisecond))))
		}
		// Renewed under a new mark: a copy that read the old one and tries
		// to take it over concurrently must find it changed.
		renewedAt, mark := r.now(), newMark()
		var took bool
		if err := r.wait.wait(ctx, false, func(ctx context.Context) (err error) {
			renewedAt = r.now()
			took, err = r.store.TakeOver(ctx, id, step, rec, mark)
			return err
		}); err != nil {
			return stream.NotCalled(err)
		}
		if !took {
			return stream.NotCalled(stream.Transient(fmt.Errorf("%s of %s: another copy took the step over: %w", step, id, ErrOutcomeUnknown)))
		}
		p.mark = mark
		deadline = renewedAt.Add(r.staleAfter / 2)
	}
	if err := ctx.Err(); err != nil {
		return stream.NotCalled(stream.Transient(fmt.Errorf("%s of %s not called: %w", step, id, err)))
	}
	if r.clock != nil {
		deadline = time.Now().Add(deadline.Sub(r.now())) // a test's clock: the context's is the real one
	}
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	callErr := r.call(callCtx, p)
	cancel()
	switch {
	case callErr == nil:
		value := ""
		if step == StepDrone {
			value = p.DroneID
		}
		return r.wait.wait(ctx, true, func(ctx context.Context) error { return r.store.Record(ctx, id, step, value) })
	case outcomeUnknown(callErr):
		p.unknown = step
		return r.waitStale(fmt.Errorf("%s of %s: %w (the call ended with: %v)", step, id, ErrOutcomeUnknown, callErr),
			r.staleAfter-r.now().Sub(markedAt))
	default:
		if err := r.wait.wait(ctx, true, func(ctx context.Context) error { return r.store.Abandon(ctx, id, step, p.mark) }); err != nil {
			return err
		}
		// The retry marks the step under a new mark: a copy that read this
		// one (stale, if the abandon was held up) and asks the service
		// meanwhile must not find it again and take over the retry's call.
		p.mark = newMark()
		return callErr
	}
}

// resolve handles a step whose outcome is unknown (rec: started by another
// copy, or by this one whose call went unanswered). While the call may
// still be in flight it fails, transient; then it asks the service: a step
// that acted is recorded done (done: p learned its value), one that did
// not is taken over by this copy, to be called.
func (r *recordedStep) resolve(ctx context.Context, p *Progress, rec StepState, markedAt *time.Time) (done bool, err error) {
	id, step := p.Request.ID, r.step
	age := r.age(rec)
	if age <= r.staleAfter {
		return false, stream.NotCalled(r.waitStale(fmt.Errorf("%s of %s, started %v ago by a call not answered yet: %w",
			step, id, age.Round(time.Millisecond), ErrOutcomeUnknown), r.staleAfter-age))
	}
	if r.lookup == nil {
		return false, stream.NotCalled(fmt.Errorf("%s of %s, started %v ago and never answered: %w", step, id, age.Round(time.Second), ErrOutcomeUnknown))
	}
	value, acted, err := r.lookup(ctx, p)
	if err != nil {
		return false, stream.Transient(fmt.Errorf("%s of %s: asking the service what the unanswered call did: %w", step, id, err))
	}
	if acted {
		if err := r.wait.wait(ctx, true, func(ctx context.Context) error { return r.store.Record(ctx, id, step, value) }); err != nil {
			return false, err
		}
		r.learned(p, value)
		p.unknown = ""
		return true, nil
	}
	// Taken over under a new mark, even from this copy's own: the record
	// must change, so that another copy that read it cannot take it over
	// too.
	var took bool
	mark := newMark()
	if err := r.wait.wait(ctx, false, func(ctx context.Context) (err error) {
		*markedAt = r.now()
		took, err = r.store.TakeOver(ctx, id, step, rec, mark)
		return err
	}); err != nil {
		return false, stream.NotCalled(err)
	}
	if !took {
		return false, stream.NotCalled(stream.Transient(fmt.Errorf("%s of %s: another copy took the step over: %w", step, id, ErrOutcomeUnknown)))
	}
	p.mark, p.unknown = mark, ""
	return false, nil
}

// learned sets what a done step tells p.
func (r *recordedStep) learned(p *Progress, value string) {
	if r.step == StepDrone {
		p.DroneID = value
	}
}

// outcomeUnknown reports whether a failed call may still have acted: it
// timed out, was cancelled or lost its connection after it was sent, or
// the service (or a gateway before it) answered 500, 502 or 504 — it may
// have crashed after acting, or the answer of a call that acted was lost.
// A refused connection or any other answer from the service (a 4xx, a
// throttle, a 503) means it did not.
func outcomeUnknown(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, errUnreadableAnswer) {
		return true
	}
	var hs stream.HTTPStatuser
	if errors.As(err, &hs) {
		switch hs.HTTPStatus() {
		case 500, 502, 504:
			return true
		}
		return false
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
		if !stream.Classify(err).Transient && !storeBusy(err) {
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

// storeBusy reports a Redis that answered it cannot serve now: a primary
// demoted in a failover (READONLY), one loading its data after a restart
// (LOADING), a replica without its primary, a cluster resharding or a
// server at its client limit. Those are outages, waited out like a Redis
// that does not answer at all.
func storeBusy(err error) bool {
	return redis.IsReadOnlyError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err)
}

// newMark names a copy of a request in the step records.
func newMark() string { return strconv.FormatUint(rand.Uint64(), 36) }

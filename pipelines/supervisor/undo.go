package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/stream"
)

// Undo reverses every side effect of the workflow for p's request: it
// deletes the delivery, cancels the drone and deletes the package. Not only
// the steps p.Done lists: in an at-least-once pipeline another copy of the
// request (a replay after a crash, a duplicate) may have gone further than
// the copy that failed — it may even have completed — before the
// compensation runs. Undoing a step that was never done is harmless, and
// every undo leaves a tombstone that refuses a later copy's create, so the
// request ends cancelled whichever copy got how far. The step that failed
// is covered too: its outcome is unknown (an attempt may have timed out
// after the service acted). Checks (account, third party) have nothing to
// undo.
//
// The three undos run at once, each on its own, so that one service that
// is down or does not answer leaves nothing else booked (sharing one
// attempt's time, a hung one would starve the others). The error joins
// (errors.Join) one error per failed undo, each naming its step and the
// request; a panic in a backend is one such error. Each undo is
// idempotent, so Undo may run again, all three undos each time, after a
// crash or when the supervisor retries or replays the event.
// undosPerCompensation is the calls Undo makes at once.
const undosPerCompensation = 3

func Undo(ctx context.Context, b delivery.Backends, p delivery.Progress) error {
	id := p.Request.ID
	undos := [undosPerCompensation]struct {
		step delivery.Step
		undo func(context.Context, string) error
	}{
		{delivery.StepDelivery, b.Deliveries.Delete},
		{delivery.StepDrone, b.Drones.Cancel},
		{delivery.StepPackage, b.Packages.Delete},
	}
	var errs [len(undos)]error
	var wg sync.WaitGroup
	for i, u := range undos {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("undoing %s of %s: %w", u.step, id, stream.NewPanicError(r))
				}
			}()
			if err := u.undo(ctx, id); err != nil {
				errs[i] = fmt.Errorf("undoing %s of %s: %w", u.step, id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs[:]...)
}

// Classify is stream.Classify for the supervisor's calls with the
// statuses of DefaultRetry: they are all idempotent (DELETEs, a
// notification kept per request), so an HTTP 5xx is transient too, worth
// another attempt, where stream.Classify would take a 500 for good. An
// error that joins several (Undo's, when more than one undo failed) is
// transient if any of them is: the attempt that retries it runs every undo
// again, and the ones that failed for good fail again and are reported
// then. Its RetryAfter is the longest any transient part asked for.
func Classify(err error) stream.Classification {
	p := DefaultRetry()
	return classifyWith(&p, err)
}

// classifyWith is Classify with the statuses of p's TransientStatus (the
// supervisor's policy, which a worker's flags may change).
func classifyWith(p *flow.RetryPolicy, err error) stream.Classification {
	if err == nil {
		return stream.Classification{}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		out := stream.Classification{Reason: stream.ReasonOther}
		for _, e := range j.Unwrap() {
			if c := classifyWith(p, e); c.Transient && (!out.Transient || c.RetryAfter > out.RetryAfter) {
				out = c
			}
		}
		return out
	}
	if c := p.Classify(err); c.Transient {
		return c
	}
	// A wrapper (the stage's "undoing drone of ...", a call timeout) is
	// what it wraps: a join further down decides.
	if inner := errors.Unwrap(err); inner != nil {
		return classifyWith(p, inner)
	}
	return stream.Classification{Reason: stream.ReasonOther}
}

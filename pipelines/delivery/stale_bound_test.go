package delivery

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
)

// lateBegin is a step store whose Begin answers after delay, with no
// record there before; the rest succeeds at once.
type lateBegin struct{ delay time.Duration }

func (s lateBegin) Begin(context.Context, string, Step, string) (StepState, error) {
	time.Sleep(s.delay)
	return StepState{}, nil
}
func (lateBegin) Record(context.Context, string, Step, string) error  { return nil }
func (lateBegin) Abandon(context.Context, string, Step, string) error { return nil }
func (lateBegin) TakeOver(context.Context, string, Step, StepState, string) (bool, error) {
	return true, nil
}

// callWindow runs a recorded drone step once over a store whose Begin
// answers after beginDelay, and returns how long its call had before the
// cut (0: no call made).
func callWindow(t *testing.T, staleAfter, beginDelay time.Duration) time.Duration {
	t.Helper()
	var window time.Duration
	r := &recordedStep{store: lateBegin{beginDelay}, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: staleAfter,
		call: func(ctx context.Context, p *Progress) error {
			d, _ := ctx.Deadline()
			window = time.Until(d)
			return nil
		}}
	_ = r.run(context.Background(), &Progress{Request: Request{ID: "d-1"}})
	return window
}

// With StaleAfter at MinStaleAfter of a policy, every call the recorded
// step makes, however late Begin answered, has the policy's whole attempt
// timeout before the cut; a little less and a late Begin leaves a call
// less than that.
func TestMinStaleAfterLeavesEveryCallItsAttemptTimeout(t *testing.T) {
	slow := flow.Interactive()
	slow.AttemptTimeout = 2 * time.Second
	for _, p := range []flow.RetryPolicy{DefaultRetry(), flow.Interactive(), slow} {
		synctest.Test(t, func(t *testing.T) {
			s := MinStaleAfter(&p)
			for _, delay := range []time.Duration{0, s / 8, s/4 - time.Millisecond} {
				if w := callWindow(t, s, delay); w < p.AttemptTimeout {
					t.Errorf("StaleAfter %v, Begin answered after %v: the call had %v, less than its %v attempt timeout",
						s, delay, w, p.AttemptTimeout)
				}
			}
			if short := s - 100*time.Millisecond; 4*p.AttemptTimeout > MinStaleAfterFloor {
				delay := short/4 - time.Millisecond
				if w := callWindow(t, short, delay); w == 0 || w >= p.AttemptTimeout {
					t.Errorf("StaleAfter %v, Begin answered after %v: the call had %v; want a call cut before its %v attempt timeout",
						short, delay, w, p.AttemptTimeout)
				}
			}
		})
	}
}

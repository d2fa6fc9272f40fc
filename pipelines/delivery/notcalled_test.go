package delivery

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// The drone step's failures before it calls the service (a mark another
// copy holds, not stale yet; a step store that answered Begin too late to
// leave the call its time) are marked NotCalled, so that the step's
// breaker does not count them against a healthy drone service; a call
// that was made and ended without an answer is not. Before, after a
// worker crash the replays of its fresh marks all failed "started 0s ago
// by a call not answered yet", opened the drone breaker for everyone, and
// kept it open: every half-open probe failed the same way.
func TestStepErrorsBeforeTheCallAreNotCalled(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	ctx := context.Background()
	calls := 0
	var callErr error
	step := func(s StepStore, staleAfter time.Duration) *recordedStep {
		return &recordedStep{store: s, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: staleAfter,
			call: func(ctx context.Context, p *Progress) error {
				calls++
				return callErr
			},
			lookup: func(ctx context.Context, p *Progress) (string, bool, error) { return "", false, nil }}
	}

	// Another copy's mark, fresh.
	if _, err := store.Begin(ctx, "n1", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	err := step(store, 10*time.Second).run(ctx, &Progress{Request: Request{ID: "n1"}})
	if c := stream.Classify(err); !c.NotCalled || !c.Transient || c.RetryAfter == 0 || calls != 0 {
		t.Fatalf("a mark not stale yet: %v, %+v, %d calls; want a transient error marked not called, asking to wait", err, c, calls)
	}

	// Begin answered too late to leave the call its time.
	sb := &slowBegin{StepStore: store, delay: 300 * time.Millisecond}
	err = step(sb, 400*time.Millisecond).run(ctx, &Progress{Request: Request{ID: "n2"}})
	if c := stream.Classify(err); !c.NotCalled || !c.Transient || calls != 0 {
		t.Fatalf("a Begin answered 300 ms late with StaleAfter 400 ms: %v, %+v, %d calls; want a transient error marked not called", err, c, calls)
	}

	// A call made whose connection broke: the service was called.
	callErr = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	err = step(store, 10*time.Second).run(ctx, &Progress{Request: Request{ID: "n3"}})
	if c := stream.Classify(err); c.NotCalled || !c.Transient || calls != 1 {
		t.Fatalf("a call cut after it was sent: %v, %+v, %d calls; want a transient error not marked", err, c, calls)
	}
}

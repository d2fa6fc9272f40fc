package delivery

import (
	"context"
	"net"
	"strconv"
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

// statusErr is a service's answer with an HTTP status.
type statusErr int

func (e statusErr) Error() string   { return "status " + strconv.Itoa(int(e)) }
func (e statusErr) HTTPStatus() int { return int(e) }

// Every error of an attempt that reached the drone service is the
// service's: a refusal it answered, a call cut by its deadline, a failed
// lookup of what an unanswered call did. None is marked NotCalled (which
// would keep a failing service from ever opening its breaker); the retry
// of a cut call, which calls nothing, is.
func TestStepErrorsAfterReachingTheServiceAreNotMarked(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	ctx := context.Background()
	var calls, lookups int
	var call func(ctx context.Context) error
	var lookupErr error
	step := func(staleAfter time.Duration) *recordedStep {
		return &recordedStep{store: store, wait: &storeWaiter{limit: time.Minute}, step: StepDrone, staleAfter: staleAfter,
			call: func(ctx context.Context, p *Progress) error { calls++; return call(ctx) },
			lookup: func(ctx context.Context, p *Progress) (string, bool, error) {
				lookups++
				return "", false, lookupErr
			}}
	}
	notMarked := func(what string, err error, wantCalls, wantLookups int) {
		t.Helper()
		if err == nil || stream.IsNotCalled(err) || stream.Classify(err).NotCalled || calls != wantCalls || lookups != wantLookups {
			t.Fatalf("%s: %v (not called %v), %d calls, %d lookups; want an error not marked, %d calls, %d lookups",
				what, err, stream.IsNotCalled(err), calls, lookups, wantCalls, wantLookups)
		}
	}

	call = func(context.Context) error { return stream.Transient(statusErr(503)) }
	notMarked("the service answered 503", step(10*time.Second).run(ctx, &Progress{Request: Request{ID: "m1"}}), 1, 0)

	call = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	cut := &Progress{Request: Request{ID: "m2"}}
	notMarked("the call cut by its deadline", step(200*time.Millisecond).run(ctx, cut), 2, 0)
	// Its retry at once: the call may still be in flight, nothing is called.
	if err := step(200*time.Millisecond).run(ctx, cut); !stream.IsNotCalled(err) || calls != 2 {
		t.Fatalf("the retry of a cut call, before its mark is stale: %v, %d calls; want an error marked not called, 2 calls", err, calls)
	}

	// A mark gone stale: the lookup asks the service, and fails.
	if _, err := store.Begin(ctx, "m3", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // twice StaleAfter, by the store's clock too
	lookupErr = stream.Transient(statusErr(502))
	notMarked("the lookup of a stale mark failed", step(50*time.Millisecond).run(ctx, &Progress{Request: Request{ID: "m3"}}), 2, 1)
}

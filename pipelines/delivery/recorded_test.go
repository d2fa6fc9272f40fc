package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// A non-idempotent step behind step records: done once, skipped on replay;
// a call the service refused may be made again; a call cut short (or a
// worker killed mid-call) is never made again and fails as unknown, a
// permanent failure that leads to compensation.
func TestRecordedStep(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	store := NewRedisSteps(cl, time.Minute)
	defer store.Close()
	ctx := context.Background()
	calls := 0
	var answer error
	step := recorded(store, &storeWaiter{limit: time.Minute}, StepDrone, func(ctx context.Context, p *Progress) error {
		calls++
		if answer != nil {
			return answer
		}
		p.DroneID = "drone-" + p.Request.ID
		return nil
	})
	progress := func(id string) *Progress { return &Progress{Request: Request{ID: id}} }

	// Done once; a replay skips the call and gets the recorded value.
	if err := step(ctx, progress("a")); err != nil || calls != 1 {
		t.Fatalf("first: %v, %d calls", err, calls)
	}
	replay := progress("a")
	if err := step(ctx, replay); err != nil || calls != 1 || replay.DroneID != "drone-a" {
		t.Fatalf("replay: %v, %d calls, drone %q", err, calls, replay.DroneID)
	}

	// The service answered "unavailable": it did not act, so a retry calls
	// again.
	answer = stream.Transient(errors.New("503 service unavailable"))
	if err := step(ctx, progress("b")); !stream.Classify(err).Transient {
		t.Fatalf("refused call: %v", err)
	}
	answer = nil
	if err := step(ctx, progress("b")); err != nil || calls != 3 {
		t.Fatalf("retry after a refusal: %v, %d calls", err, calls)
	}

	// An attempt that timed out may have acted: never again.
	answer = context.DeadlineExceeded
	err := step(ctx, progress("c"))
	if !errors.Is(err, ErrOutcomeUnknown) || stream.Classify(err).Transient {
		t.Fatalf("timed out call: %v (must be permanent)", err)
	}
	answer = nil
	if err := step(ctx, progress("c")); !errors.Is(err, ErrOutcomeUnknown) || calls != 4 {
		t.Fatalf("replay after a timeout: %v, %d calls", err, calls)
	}

	// A worker killed between the call and its record leaves the step
	// started: the replay does not call.
	if _, err := store.Begin(ctx, "d", StepDrone, "a copy that crashed"); err != nil {
		t.Fatal(err)
	}
	if err := step(ctx, progress("d")); !errors.Is(err, ErrOutcomeUnknown) || calls != 4 {
		t.Fatalf("replay after a crash mid-call: %v, %d calls", err, calls)
	}
}

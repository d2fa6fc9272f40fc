package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// booked returns simulated services in which request id has a package and
// a drone.
func booked(ctx context.Context, id string) (*delivery.Ledger, delivery.Backends, delivery.Request) {
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := delivery.Request{ID: id, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}, Deadline: time.Now()}
	_ = b.Packages.Put(ctx, r.ID, r)
	_, _ = b.Drones.Schedule(ctx, r.ID, r.Pickup)
	return l, b, r
}

func TestUndoReversesCompletedStepsIdempotently(t *testing.T) {
	ctx := context.Background()
	l, b, r := booked(ctx, "d-9")
	p := delivery.Progress{Request: r, Done: []delivery.Step{delivery.StepAccount, delivery.StepPackage, delivery.StepThirdParty, delivery.StepDrone}}
	for range 2 { // a supervisor that crashed mid-compensation runs it again
		if err := supervisor.Undo(ctx, b, p); err != nil {
			t.Fatal(err)
		}
	}
	if l.Live("packages", r.ID) || l.Live("drones", r.ID) || l.Created("packages", r.ID) != 1 {
		t.Fatalf("after undo: package live %v, drone live %v", l.Live("packages", r.ID), l.Live("drones", r.ID))
	}
}

// callLog records the undo calls, which Undo makes at once.
type callLog struct {
	mu    sync.Mutex
	names []string
}

func (c *callLog) add(name string) {
	c.mu.Lock()
	c.names = append(c.names, name)
	c.mu.Unlock()
}

func (c *callLog) sorted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.names))
}

type recorder struct {
	delivery.Drones
	calls *callLog
}

func (r recorder) Cancel(ctx context.Context, id string) error {
	r.calls.add("cancel_drone")
	return r.Drones.Cancel(ctx, id)
}

type pkgRecorder struct {
	delivery.Packages
	calls *callLog
}

func (r pkgRecorder) Delete(ctx context.Context, id string) error {
	r.calls.add("delete_package")
	return r.Packages.Delete(ctx, id)
}

// Every service is asked, whatever the steps the failed copy did: the
// one that failed (its outcome is unknown) and the later ones too.
func TestUndoCallsEveryService(t *testing.T) {
	calls := &callLog{}
	b := delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	b.Drones = recorder{b.Drones, calls}
	b.Packages = pkgRecorder{b.Packages, calls}
	// create_package succeeded, schedule_drone failed: its outcome is
	// unknown, so it is undone too.
	p := delivery.Progress{Request: delivery.Request{ID: "x"}, Done: []delivery.Step{delivery.StepAccount, delivery.StepPackage}}
	if err := supervisor.Undo(context.Background(), b, p); err != nil {
		t.Fatal(err)
	}
	if got := calls.sorted(); !slices.Equal(got, []string{"cancel_drone", "delete_package"}) {
		t.Fatalf("undo calls %v", got)
	}
}

// A copy of the request that failed early is compensated after another
// copy (a replay, a duplicate) completed every step: nothing may stay, and
// a copy still on its way is refused from then on.
func TestUndoCoversWhatOtherCopiesDid(t *testing.T) {
	ctx := context.Background()
	l, b, r := booked(ctx, "d-7")
	_ = b.Deliveries.Put(ctx, r.ID, delivery.Progress{Request: r})
	failedEarly := delivery.Progress{Request: r, Done: []delivery.Step{delivery.StepAccount}}
	if err := supervisor.Undo(ctx, b, failedEarly); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"packages", "drones", "deliveries"} {
		if l.Live(svc, r.ID) {
			t.Fatalf("%s still live after compensation", svc)
		}
	}
	if _, err := b.Drones.Schedule(ctx, r.ID, r.Pickup); !errors.Is(err, delivery.ErrCancelled) {
		t.Fatalf("a late copy booked a drone after compensation: %v", err)
	}
}

// failingDrones refuses every cancel.
type failingDrones struct {
	delivery.Drones
	calls *callLog
}

func (d failingDrones) Cancel(context.Context, string) error {
	d.calls.add("cancel_drone")
	return errors.New("drone service refused the cancel")
}

// One undo that fails does not keep the others from being done: the
// package is deleted although the drone could not be cancelled, and the
// error names the step that failed.
func TestUndoAttemptsEveryUndo(t *testing.T) {
	ctx := context.Background()
	l, b, r := booked(ctx, "d-5")
	calls := &callLog{}
	b.Drones = failingDrones{b.Drones, calls}
	b.Packages = pkgRecorder{b.Packages, calls}
	p := delivery.Progress{Request: r, Done: []delivery.Step{delivery.StepAccount, delivery.StepPackage}}
	err := supervisor.Undo(ctx, b, p)
	if err == nil {
		t.Fatal("Undo reported success although the drone cancel failed")
	}
	if !strings.Contains(err.Error(), string(delivery.StepDrone)) || !strings.Contains(err.Error(), r.ID) {
		t.Fatalf("the error does not name the failed step and request: %v", err)
	}
	if strings.Contains(err.Error(), string(delivery.StepPackage)) {
		t.Fatalf("the error names a step that succeeded: %v", err)
	}
	if got := calls.sorted(); !slices.Equal(got, []string{"cancel_drone", "delete_package"}) {
		t.Fatalf("undo calls %v, want [cancel_drone delete_package]", got)
	}
	if l.Live("packages", r.ID) {
		t.Fatal("the package is still live: Undo stopped at the failed drone cancel")
	}
}

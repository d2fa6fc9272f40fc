package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/stream"
)

// Without a producer to park or dead-letter with, an undo that cannot be
// done stops the pipeline, naming the request and the undo, and leaves the
// event unsettled (so it is not committed and is redone after a restart).
func TestWithoutParkingAFailedUndoStopsThePipeline(t *testing.T) {
	ctx := context.Background()
	l, b, r := booked(ctx, "d-400")
	refused := &flow.HTTPError{Method: "DELETE", URL: "/drones/" + r.ID, Status: 400, Body: "no such booking"}
	b.Drones = &answeringDrones{Drones: b.Drones, errs: []error{refused}}
	src, st := eventSource(t, r.ID)
	g, err := supervisor.New(supervisor.Config{Source: src, Committer: noCommit, Backends: b,
		Notifier: supervisor.NewNotifications(), Retry: quickRetry(3), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = g.Run(runCtx)
	if err == nil || !stream.IsFatal(err) {
		t.Fatalf("Run returned %v, want a fatal error", err)
	}
	if !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), string(delivery.StepDrone)) {
		t.Fatalf("the error does not name the request and the undo: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run did not stop by itself: %v", err)
	}
	if o, ok := st.get(0); ok {
		t.Fatalf("the event was settled (%v) although its undo failed", o)
	}
	if l.Live("packages", r.ID) {
		t.Fatal("the package is still live: the other undos must be done even so")
	}
}

package supervisor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/stream"
)

// settles records how each message of an eventSource was settled.
type settles struct {
	mu  sync.Mutex
	out map[int64]stream.Outcome
}

func (s *settles) Settle(id int64, o stream.Outcome) {
	s.mu.Lock()
	s.out[id] = o
	s.mu.Unlock()
}

func (s *settles) get(id int64) (stream.Outcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.out[id]
	return o, ok
}

// eventSource emits a compensation event, as the scheduler writes it, for
// each id (keyed by the id), with a handle that reports its settle to the
// returned settles under the id's index; then its input ends.
func eventSource(t *testing.T, ids ...string) (stream.Source[[]byte], *settles) {
	t.Helper()
	st := &settles{out: map[int64]stream.Outcome{}}
	msgs := make([]stream.Message[[]byte], len(ids))
	for i, id := range ids {
		m := stream.NewMessage(compensationEvent(t, id), stream.NewHandle(st, int64(i)))
		m.Key = []byte(id)
		msgs[i] = m
	}
	return stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, m := range msgs {
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	}), st
}

// compensationEvent is the event the scheduler writes for a request whose
// drone step failed after its package was created.
func compensationEvent(t *testing.T, id string) []byte {
	t.Helper()
	ev := delivery.Compensation{Progress: delivery.Progress{
		Request: delivery.Request{ID: id, Owner: "o-" + id, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
			Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour)},
		Done: []delivery.Step{delivery.StepAccount, delivery.StepPackage, delivery.StepThirdParty}},
		Stage: string(delivery.StepDrone), Reason: "schedule_drone: service unavailable"}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// quickRetry retries a few times within milliseconds.
func quickRetry(attempts int) *flow.RetryPolicy {
	return &flow.RetryPolicy{Strategy: flow.Regular, Jitter: flow.NoJitter, MaxAttempts: attempts,
		BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
}

// answeringDrones answers each cancel with the next of errs (nil: the
// real cancel), then with the last of them for ever.
type answeringDrones struct {
	delivery.Drones
	mu    sync.Mutex
	calls int
	errs  []error
}

func (d *answeringDrones) Cancel(ctx context.Context, id string) error {
	d.mu.Lock()
	err := d.errs[min(d.calls, len(d.errs)-1)]
	d.calls++
	d.mu.Unlock()
	if err != nil {
		return err
	}
	return d.Drones.Cancel(ctx, id)
}

func (d *answeringDrones) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

var noCommit = stream.CommitterFunc(func(context.Context) error { return nil })

// A 500 from a service on an undo is retried: undos are idempotent
// DELETEs, so a server error is worth another attempt.
func TestUndoStageRetriesServerErrors(t *testing.T) {
	ctx := context.Background()
	l, b, r := booked(ctx, "d-500")
	server := &flow.HTTPError{Method: "DELETE", URL: "/drones/" + r.ID, Status: 500, Body: "internal error"}
	drones := &answeringDrones{Drones: b.Drones, errs: []error{server, server, nil}}
	b.Drones = drones
	src, st := eventSource(t, r.ID)
	g, err := supervisor.New(supervisor.Config{Source: src, Committer: noCommit, Backends: b,
		Notifier: supervisor.NewNotifications(), Retry: quickRetry(5), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := g.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if n := drones.count(); n != 3 || l.Live("drones", r.ID) {
		t.Fatalf("drone cancel called %d times (want 3: two 500s, then success); drone still booked: %v", n, l.Live("drones", r.ID))
	}
	if o, _ := st.get(0); o != stream.Completed {
		t.Fatalf("event settled as %v, want completed", o)
	}
}

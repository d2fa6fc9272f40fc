package demo

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// A drone booking left unanswered (a call cut under a starved CPU, say)
// is looked up at the drone service once its started mark is older than
// staleAfter: the embedded Redis's marks must age, or the request waits
// for ever, parked and replayed, and the run counts it lost.
func TestEmbeddedRedisMarksAge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cl cleanups
	defer cl.run()
	cfg := Config{Redis: EmbeddedRedis}
	_, steps, err := startBackends(ctx, &cfg, delivery.NewLedger(), io.Discard, &cl)
	if err != nil {
		t.Fatal(err)
	}
	if steps == nil {
		t.Fatal("no step records with the embedded Redis")
	}
	if rec, err := steps.Begin(ctx, "d-1", delivery.StepDrone, "first"); err != nil || rec != (delivery.StepState{}) {
		t.Fatalf("first Begin: %+v, %v; want no record", rec, err)
	}
	time.Sleep(10 * time.Millisecond) // any time at all: the mark must be older than 0 then
	rec, err := steps.Begin(ctx, "d-1", delivery.StepDrone, "second")
	if err != nil {
		t.Fatal(err)
	}
	if rec.StartedBy != "first" || rec.Age <= 0 {
		t.Fatalf("the mark read back: started by %q, age %v; want started by \"first\", older than 0 (it never turns stale otherwise)",
			rec.StartedBy, rec.Age)
	}
}

// fakeSteps is a store whose every mark reads back 0 s old, as the
// embedded Redis's do.
type fakeSteps struct {
	marks map[string]string
}

func (f *fakeSteps) Begin(_ context.Context, id string, _ delivery.Step, mark string) (delivery.StepState, error) {
	if m, ok := f.marks[id]; ok {
		if m == "done" {
			return delivery.StepState{Done: true}, nil
		}
		return delivery.StepState{StartedBy: m}, nil
	}
	f.marks[id] = mark
	return delivery.StepState{}, nil
}

func (f *fakeSteps) Record(_ context.Context, id string, _ delivery.Step, _ string) error {
	f.marks[id] = "done"
	return nil
}

func (f *fakeSteps) Abandon(_ context.Context, id string, _ delivery.Step, mark string) error {
	if f.marks[id] == mark {
		delete(f.marks, id)
	}
	return nil
}

func (f *fakeSteps) TakeOver(_ context.Context, id string, _ delivery.Step, from delivery.StepState, mark string) (bool, error) {
	if f.marks[id] != from.StartedBy {
		return false, nil
	}
	f.marks[id] = mark
	return true, nil
}

// A mark's age runs from when its write returned, starts again when it is
// taken over, and a mark written and abandoned leaves no age behind for
// the next one.
func TestAgedStepsAges(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := newAgedSteps(&fakeSteps{marks: map[string]string{}}, func() time.Time { return now })
	age := func(mark string) time.Duration {
		t.Helper()
		rec, err := s.Begin(ctx, "d-1", delivery.StepDrone, "other")
		if err != nil || rec.StartedBy != mark {
			t.Fatalf("Begin: %+v, %v; want started by %q", rec, err, mark)
		}
		return rec.Age
	}
	if _, err := s.Begin(ctx, "d-1", delivery.StepDrone, "a"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(3 * time.Second)
	if got := age("a"); got != 3*time.Second {
		t.Fatalf("age of a after 3s: %v", got)
	}
	rec, _ := s.Begin(ctx, "d-1", delivery.StepDrone, "other")
	if took, err := s.TakeOver(ctx, "d-1", delivery.StepDrone, rec, "b"); err != nil || !took {
		t.Fatalf("TakeOver: %v, %v", took, err)
	}
	now = now.Add(time.Second)
	if got := age("b"); got != time.Second {
		t.Fatalf("age of b, taken over 1s ago: %v", got)
	}
	if err := s.Abandon(ctx, "d-1", delivery.StepDrone, "b"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	if _, err := s.Begin(ctx, "d-1", delivery.StepDrone, "c"); err != nil {
		t.Fatal(err)
	}
	if got := age("c"); got != 0 {
		t.Fatalf("age of c, just written after b was abandoned: %v", got)
	}
	if err := s.Record(ctx, "d-1", delivery.StepDrone, "drone-1"); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Begin(ctx, "d-1", delivery.StepDrone, "d"); !rec.Done {
		t.Fatalf("after Record: %+v, want done", rec)
	}
	if len(s.marked) != 0 {
		t.Fatalf("marks kept after the step was done: %v", s.marked)
	}
}

// A mark the store holds but that this store never saw written (its
// Begin ended in an error) starts ageing when first read: never older
// than it can be.
func TestAgedStepsUnseenMarkAgesFromFirstRead(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	inner := &fakeSteps{marks: map[string]string{"d-2": "lost"}}
	s := newAgedSteps(inner, func() time.Time { return now })
	for _, want := range []time.Duration{0, 2 * time.Second} {
		rec, err := s.Begin(ctx, "d-2", delivery.StepDrone, "other")
		if err != nil || rec.StartedBy != "lost" || rec.Age != want {
			t.Fatalf("Begin: %+v, %v; want started by lost, %v old", rec, err, want)
		}
		now = now.Add(2 * time.Second)
	}
}

// The demo's staleAfter is one the scheduler's retry policy allows: below
// 4 × its longest attempt timeout a drone call could be cut by the mark's
// bound before its own timeout, its outcome then unknown.
func TestDemoStaleAfterFitsTheSchedulersPolicy(t *testing.T) {
	if least := delivery.MinStaleAfter(nil); staleAfter < least {
		t.Fatalf("staleAfter %v, under the %v the scheduler's retry policy needs", staleAfter, least)
	}
}

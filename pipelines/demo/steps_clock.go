package demo

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// agedSteps gives the step records of the embedded Redis the ages its
// clock does not. A started mark's age is the time-to-live it was written
// with less what it has left (delivery.RedisSteps), but miniredis counts a
// key's time-to-live down only when told to, and doing so walks (and
// sorts) every key under its lock: at a few hundred thousand records,
// most of a second each time. Left as it is, every mark stays 0 s old: a
// request whose drone call went unanswered (cut at StaleAfter/2 on a
// starved CPU, say) never finds its mark stale, never asks the drone
// service what the call did, and is parked and replayed until the drain
// gives up on it.
//
// Every worker of a demo runs in this process and goes through this one
// store, so it sees every mark written: it notes when, by its clock, and
// reads the age back from that. It errs on the young side, as a store
// must (an old-looking mark lets another copy book the drone while the
// first call may still be in flight): a mark is noted when the write that
// made it has returned, and one it never saw written (its Begin ended in
// an error) starts ageing when it is first read back.
type agedSteps struct {
	delivery.StepStore
	now func() time.Time

	mu     sync.Mutex
	marked map[stepID]markedAt // started marks, until recorded done or abandoned
}

type stepID struct {
	id   string
	step delivery.Step
}

type markedAt struct {
	mark string
	at   time.Time
}

func newAgedSteps(s delivery.StepStore, now func() time.Time) *agedSteps {
	return &agedSteps{StepStore: s, now: now, marked: map[stepID]markedAt{}}
}

// Begin is the store's, with the age of a started mark by this clock
// (the store's own if that says it is older).
func (s *agedSteps) Begin(ctx context.Context, id string, step delivery.Step, mark string) (delivery.StepState, error) {
	rec, err := s.StepStore.Begin(ctx, id, step, mark)
	if err != nil {
		return rec, err
	}
	k := stepID{id, step}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case rec.Done:
		delete(s.marked, k)
	case rec.StartedBy == "":
		s.marked[k] = markedAt{mark, now} // this Begin wrote mark
	case rec.Age >= 0: // a negative age says old already
		m, ok := s.marked[k]
		if !ok || m.mark != rec.StartedBy {
			m = markedAt{rec.StartedBy, now} // written by a Begin that ended in an error
			s.marked[k] = m
		}
		rec.Age = max(rec.Age, now.Sub(m.at))
	}
	return rec, nil
}

// TakeOver is the store's; a mark taken over is new.
func (s *agedSteps) TakeOver(ctx context.Context, id string, step delivery.Step, from delivery.StepState, mark string) (bool, error) {
	took, err := s.StepStore.TakeOver(ctx, id, step, from, mark)
	if err == nil && took {
		now := s.now()
		s.mu.Lock()
		s.marked[stepID{id, step}] = markedAt{mark, now}
		s.mu.Unlock()
	}
	return took, err
}

// Record is the store's; a step done has no mark left.
func (s *agedSteps) Record(ctx context.Context, id string, step delivery.Step, value string) error {
	err := s.StepStore.Record(ctx, id, step, value)
	if err == nil {
		s.mu.Lock()
		delete(s.marked, stepID{id, step})
		s.mu.Unlock()
	}
	return err
}

// Abandon is the store's; mark, removed, ages no more.
func (s *agedSteps) Abandon(ctx context.Context, id string, step delivery.Step, mark string) error {
	err := s.StepStore.Abandon(ctx, id, step, mark)
	if err == nil {
		s.mu.Lock()
		if m, ok := s.marked[stepID{id, step}]; ok && m.mark == mark {
			delete(s.marked, stepID{id, step})
		}
		s.mu.Unlock()
	}
	return err
}

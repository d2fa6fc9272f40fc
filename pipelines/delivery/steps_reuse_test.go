package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// Step operations whose callers give up at any point (before their batch
// is sent, while it is in flight, as its answer arrives), mixed with
// operations that wait for theirs, on the shared batchers: every
// operation that returns without an error has its own command's answer.
// An answer channel put back with an answer still to come would hand that
// answer to another operation, which would then read a command not yet
// run (a nil record, a data race, or another request's record): a drone
// step read as done, or not started, when it was.
func TestRedisStepsGiveUpsLeaveNoAnswerToAnother(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var gaveUp, answered atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 150 {
				if ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("reuse-%d-%d", g, i)
				// A Begin whose caller gives up after 0 to 300 µs.
				short, stop := context.WithTimeout(ctx, time.Duration(rnd.IntN(300))*time.Microsecond)
				st, err := s.Begin(short, id, delivery.StepDrone, "gave-up")
				stop()
				firstRan := err == nil
				if firstRan {
					answered.Add(1)
				} else {
					gaveUp.Add(1)
				}
				switch {
				case err == nil && (st.Done || st.StartedBy != ""):
					t.Errorf("%s: a fresh step read %+v", id, st)
					return
				case err != nil && !errors.Is(err, context.DeadlineExceeded):
					t.Errorf("%s: a Begin that gave up: %v", id, err)
					return
				}
				// A Record whose caller gives up too, on another request.
				other := id + "-other"
				short, stop = context.WithTimeout(ctx, time.Duration(rnd.IntN(300))*time.Microsecond)
				if err := s.Record(short, other, delivery.StepDrone, "drone-x"); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: a Record that gave up: %v", other, err)
				}
				stop()
				// The request's own operations, waited for.
				st, err = s.Begin(ctx, id, delivery.StepDrone, "waited")
				if err != nil {
					t.Errorf("%s: Begin: %v", id, err)
					return
				}
				if st.Done || (firstRan && st.StartedBy != "gave-up") || (st.StartedBy != "" && st.StartedBy != "gave-up") {
					t.Errorf("%s: Begin after one that gave up (answered: %v): %+v", id, firstRan, st)
					return
				}
				if err := s.Record(ctx, id, delivery.StepDrone, "drone-"+id); err != nil {
					t.Errorf("%s: Record: %v", id, err)
					return
				}
				st, err = s.Begin(ctx, id, delivery.StepDrone, "after")
				if err != nil || !st.Done || st.Value != "drone-"+id {
					t.Errorf("%s: Begin after its record: %+v %v, want done with its own drone", id, st, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("Begins that gave up: %d, answered in time: %d", gaveUp.Load(), answered.Load())
}

// Operations in flight and queued when the store closes each get one
// answer: their own result, errStepsClosed, or their context's end; none
// waits forever and none reads another's answer. Operations after the
// close fail without reaching Redis.
func TestRedisStepsCloseUnderLoadAnswersEachOnce(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	for round := range 5 {
		s := delivery.NewRedisSteps(cl, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		var closedErrs atomic.Int64
		start := make(chan struct{})
		for g := range 64 {
			wg.Go(func() {
				<-start
				for i := range 40 {
					id := fmt.Sprintf("close-%d-%d-%d", round, g, i)
					st, err := s.Begin(ctx, id, delivery.StepDrone, "m")
					switch {
					case err != nil && strings.Contains(err.Error(), "step store closed"):
						closedErrs.Add(1)
						continue
					case err != nil:
						t.Errorf("%s: Begin: %v", id, err)
						return
					case st.Done || st.StartedBy != "":
						t.Errorf("%s: a fresh step read %+v", id, st)
						return
					}
					err = s.Record(ctx, id, delivery.StepDrone, id)
					if err != nil && !strings.Contains(err.Error(), "step store closed") {
						t.Errorf("%s: Record: %v", id, err)
						return
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		s.Close()
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("round %d: operations still waiting 30 s after the close", round)
		}
		cancel()
		t.Logf("round %d: %d Begins answered that the store closed", round, closedErrs.Load())
	}
}

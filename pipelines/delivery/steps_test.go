package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// Concurrent operations through the batcher land in Redis, each answered
// with its own result: a step starts once, a second Begin sees who started
// it, a record is seen as done, an abandoned step can start again.
func TestRedisStepsBatches(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			id := fmt.Sprintf("r-%d", i)
			check := func(what string, step delivery.Step, mark string, want delivery.StepState) bool {
				got, err := s.Begin(ctx, id, step, mark)
				if err == nil && got.StartedBy != "" && (got.Age < 0 || got.Age > time.Minute) {
					t.Errorf("%s %s: started %v ago", id, what, got.Age)
				}
				if err != nil || got.Done != want.Done || got.Value != want.Value || got.StartedBy != want.StartedBy {
					t.Errorf("%s %s: got %+v %v, want %+v", id, what, got, err, want)
					return false
				}
				return true
			}
			if !check("fresh", delivery.StepDrone, "a", delivery.StepState{}) ||
				!check("started", delivery.StepDrone, "b", delivery.StepState{StartedBy: "a"}) {
				return
			}
			if err := s.Record(ctx, id, delivery.StepDrone, "drone-"+id); err != nil {
				t.Error(err)
				return
			}
			if !check("done", delivery.StepDrone, "b", delivery.StepState{Done: true, Value: "drone-" + id}) ||
				!check("fresh", delivery.StepPackage, "a", delivery.StepState{}) {
				return
			}
			// Abandoning is for the starter's copy alone: another copy's
			// abandon (a late one, after a take-over) leaves the mark.
			if err := s.Abandon(ctx, id, delivery.StepPackage, "b"); err != nil {
				t.Error(err)
				return
			}
			if !check("abandoned by another copy", delivery.StepPackage, "c", delivery.StepState{StartedBy: "a"}) {
				return
			}
			if err := s.Abandon(ctx, id, delivery.StepPackage, "a"); err != nil {
				t.Error(err)
				return
			}
			check("abandoned", delivery.StepPackage, "c", delivery.StepState{})
		})
	}
	wg.Wait()
	if ttl := cl.TTL(ctx, "sluice:steps:r-7:schedule_drone").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("ttl %v", ttl)
	}
}

// CheckRedis accepts a real redis-server and names an unreachable one.
func TestCheckRedis(t *testing.T) {
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer cl.Close()
	if err := delivery.CheckRedis(ctx, cl); err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	if err := delivery.CheckRedis(ctx, down); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("unreachable: %v", err)
	}
}

// An unreachable Redis is an error naming the request, not a hang.
func TestRedisStepsUnreachable(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer cl.Close()
	s := delivery.NewRedisSteps(cl, time.Minute)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Begin(ctx, "d-1", delivery.StepDrone, "m")
	if err == nil || !strings.Contains(err.Error(), "d-1") {
		t.Fatalf("got %v", err)
	}
}

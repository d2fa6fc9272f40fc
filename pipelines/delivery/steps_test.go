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

// Concurrent reads and writes through the batcher land in Redis, each
// answered with its own result.
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
			if rec, err := s.Load(ctx, id); err != nil || len(rec.Done)+len(rec.Started) != 0 {
				t.Errorf("%s before: %v %v", id, rec, err)
				return
			}
			if err := s.Start(ctx, id, delivery.StepDrone); err != nil {
				t.Error(err)
				return
			}
			if rec, err := s.Load(ctx, id); err != nil || !rec.Started[delivery.StepDrone] || len(rec.Done) != 0 {
				t.Errorf("%s started: %v %v", id, rec, err)
				return
			}
			if err := s.Record(ctx, id, delivery.StepDrone, "drone-"+id); err != nil {
				t.Error(err)
				return
			}
			if err := s.Record(ctx, id, delivery.StepPackage, ""); err != nil {
				t.Error(err)
				return
			}
			rec, err := s.Load(ctx, id)
			if err != nil || rec.Done[delivery.StepDrone] != "drone-"+id || len(rec.Done) != 2 || len(rec.Started) != 0 {
				t.Errorf("%s after: %v %v", id, rec, err)
			}
		})
	}
	wg.Wait()
	if ttl := cl.TTL(ctx, "sluice:steps:r-7").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("ttl %v", ttl)
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
	_, err := s.Load(ctx, "d-1")
	if err == nil || !strings.Contains(err.Error(), "d-1") {
		t.Fatalf("got %v", err)
	}
}

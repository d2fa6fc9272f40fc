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
			if done, err := s.Done(ctx, id); err != nil || len(done) != 0 {
				t.Errorf("%s before: %v %v", id, done, err)
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
			done, err := s.Done(ctx, id)
			if err != nil || done[delivery.StepDrone] != "drone-"+id || len(done) != 2 {
				t.Errorf("%s after: %v %v", id, done, err)
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
	_, err := s.Done(ctx, "d-1")
	if err == nil || !strings.Contains(err.Error(), "d-1") {
		t.Fatalf("got %v", err)
	}
}

package delivery_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// A scheduler whose recorded steps' StaleAfter is too short for its
// retry policy's longest attempt timeout is refused when it is built, as
// the sluice command refuses such a -stale-after: its slow drone calls
// would be cut by the mark's bound before their attempt timeout, their
// outcome unknown until the mark turns stale and the service is asked.
func TestSchedulerRefusesAStaleAfterShorterThanItsCallsNeed(t *testing.T) {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never reached: the config is refused first
	defer cl.Close()
	steps := delivery.NewRedisSteps(cl, time.Minute)
	defer steps.Close()
	ledger := delivery.NewLedger()
	base := delivery.SchedulerConfig{Backends: delivery.Simulated(delivery.SimConfig{}, ledger, nil),
		Steps: steps, NonIdempotent: []delivery.Step{delivery.StepDrone}, Logger: quietLogger}

	least := delivery.MinStaleAfter(nil) // 4 × the default policy's 1 s ceiling
	cfg := base
	cfg.StaleAfter = least / 2
	_, err := delivery.NewScheduler(cfg)
	if err == nil || !strings.Contains(err.Error(), "StaleAfter") || !strings.Contains(err.Error(), least.String()) {
		t.Fatalf("StaleAfter %v with the default retry policy (least %v): got %v, want an error naming StaleAfter and %v",
			cfg.StaleAfter, least, err, least)
	}

	// The bound follows the policy given: a fixed 100 ms attempt timeout
	// needs no more than the floor.
	fixed := flow.Interactive()
	fixed.AttemptTimeout, fixed.TimeoutFactor, fixed.MaxAttemptTimeout = 100*time.Millisecond, 0, 0
	if err := fixed.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = base
	cfg.Retry, cfg.StaleAfter = &fixed, 2*time.Second
	if err := delivery.CheckStaleAfter(cfg.StaleAfter, cfg.Retry); err != nil {
		t.Fatalf("StaleAfter 2s with a 100 ms attempt timeout: %v, want it accepted", err)
	}
	cfg.StaleAfter = delivery.MinStaleAfterFloor / 2
	if _, err := delivery.NewScheduler(cfg); err == nil || !strings.Contains(err.Error(), "StaleAfter") {
		t.Fatalf("StaleAfter %v under the %v floor: got %v, want an error naming StaleAfter", cfg.StaleAfter, delivery.MinStaleAfterFloor, err)
	}

	// Without recorded steps StaleAfter bounds nothing.
	cfg = base
	cfg.Steps, cfg.NonIdempotent, cfg.StaleAfter = nil, nil, time.Millisecond
	if _, err := delivery.NewScheduler(cfg); err != nil {
		t.Fatalf("StaleAfter 1ms without recorded steps: %v, want no error", err)
	}
}

//go:build kafka

package demo_test

import (
	"os"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/demo"
)

// TestMain starts a real broker for the suite (testenv.RunTests).
func TestMain(m *testing.M) { os.Exit(testenv.RunTests(m, (*testing.M).Run)) }

// TestRealKafkaDeliveryEndToEnd runs the delivery system against a real
// Apache Kafka broker and a real redis-server (mode b: drone scheduling is
// not idempotent), with faults at every service, duplicates, malformed and
// invalid requests, and the scheduler and supervisor crashed twice mid-run.
func TestRealKafkaDeliveryEndToEnd(t *testing.T) {
	cfg := demo.Defaults(4 * time.Second)
	cfg.Brokers = []string{testenv.Broker().Addr}
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 1000, 0, 0
	cfg.Sim.TransientRate, cfg.Sim.ThrottleRate = 0.05, 0.01
	cfg.Every, cfg.Restarts, cfg.Drain = time.Second, 2, 60*time.Second
	cfg.Redis = testenv.Redis(t)
	sum, _ := runDemo(t, cfg)
	if !sum.OK() || sum.Completed == 0 || sum.Compensated == 0 {
		t.Fatalf("verification failed: %s", sum)
	}
}

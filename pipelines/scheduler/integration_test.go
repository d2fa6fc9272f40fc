//go:build kafka

package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/scheduler"
)

var broker *testenv.KafkaBroker

func init() {
	integration = func(m *testing.M) int {
		return testenv.WithKafka(m, func(b *testenv.KafkaBroker) { broker = b })
	}
}

// TestRealKafkaDeliveryEndToEnd runs the delivery system against a real
// Apache Kafka broker and a real redis-server (mode b: drone scheduling is
// not idempotent), with faults at every service, duplicates, malformed and
// invalid requests, and the scheduler and supervisor crashed twice mid-run.
func TestRealKafkaDeliveryEndToEnd(t *testing.T) {
	cfg := scheduler.Defaults(4 * time.Second)
	cfg.Brokers = []string{broker.Addr}
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 1000, 0, 0
	cfg.Sim.TransientRate, cfg.Sim.ThrottleRate = 0.05, 0.01
	cfg.Every, cfg.Restarts, cfg.Drain = time.Second, 2, 60*time.Second
	cfg.Redis = testenv.Redis(t)
	var out strings.Builder
	sum, err := scheduler.Run(context.Background(), cfg, &out)
	t.Logf("%s\n%s", out.String(), sum)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.OK() || sum.Completed == 0 || sum.Compensated == 0 {
		t.Fatalf("verification failed: %s", sum)
	}
}

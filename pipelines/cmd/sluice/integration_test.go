//go:build kafka

package main

import (
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
)

var broker *testenv.KafkaBroker

func init() {
	integration = func(m *testing.M) int {
		return testenv.WithKafka(m, func(b *testenv.KafkaBroker) { broker = b })
	}
}

// TestRealKafkaWorkerProcessesSurviveSIGKILL kills the worker processes
// mid-run as TestWorkerProcessesSurviveSIGKILL does, against a real Apache
// Kafka broker.
func TestRealKafkaWorkerProcessesSurviveSIGKILL(t *testing.T) {
	brokers := []string{broker.Addr}
	for topic, parts := range map[string]int32{"delivery-requests": 8, "delivery-failures": 4, "delivery-dead-letters": 1} {
		if err := testenv.CreateTopic(brokers, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	killWorkers(t, brokers)
}

//go:build kafka

package main

import (
	"os"
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// TestMain starts a real broker for the suite (testenv.RunTests).
func TestMain(m *testing.M) { os.Exit(testenv.RunTests(m, (*testing.M).Run)) }

// TestRealKafkaWorkerProcessesSurviveSIGKILL kills the worker processes
// mid-run as TestWorkerProcessesSurviveSIGKILL does, against a real Apache
// Kafka broker.
func TestRealKafkaWorkerProcessesSurviveSIGKILL(t *testing.T) {
	brokers := []string{testenv.Broker().Addr}
	for topic, parts := range map[string]int32{"delivery-requests": 8, "delivery-failures": 4, "delivery-dead-letters": 1,
		"delivery-failures-retry": 4, "delivery-compensation-dead-letters": 1, "delivery-requests-retry": 4} {
		if err := testenv.CreateTopic(brokers, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	killWorkers(t, kafkaTopics(t, brokers))
}

//go:build kafka

package ownership_test

import (
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// The end-to-end test of kafka_test.go on the real Apache Kafka broker of
// make test-kafka.
func TestRealKafkaOwnedAcrossJoinsLeavesAndCrashes(t *testing.T) {
	topic := "owned-" + t.Name()
	brokers := []string{testenv.Broker().Addr}
	if err := testenv.CreateTopic(brokers, topic, 8); err != nil {
		t.Fatal(err)
	}
	ownedAcrossMembers(t, brokers, topic)
}

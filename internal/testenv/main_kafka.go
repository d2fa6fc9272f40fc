//go:build kafka

package testenv

import "testing"

// RunTests runs a package's tests. Built with the kafka tag (the
// integration suite), it starts a real Apache Kafka broker first (see
// WithKafka) and stops it after; Broker returns it meanwhile. Otherwise it
// hands m to otherwise (m.Run, or goleak.VerifyTestMain).
func RunTests(m *testing.M, otherwise func(*testing.M) int) int {
	return WithKafka(m, func(b *KafkaBroker) { broker = b })
}

var broker *KafkaBroker

// Broker is the real broker of the integration suite.
func Broker() *KafkaBroker { return broker }

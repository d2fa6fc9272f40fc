package kafka_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if integration != nil {
		os.Exit(integration(m))
	}
	goleak.VerifyTestMain(m)
}

// integration is set by the kafka-tagged files: it starts a real broker,
// runs the tests and stops the broker.
var integration func(m *testing.M) int

package kafka_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		// This process is a worker that the crash test starts and kills.
		os.Exit(crashWorker())
	}
	if integration != nil {
		// The integration suite (build tag kafka) runs against a real broker.
		os.Exit(integration(m))
	}
	goleak.VerifyTestMain(m)
}

// integration is set by the kafka-tagged files: it starts a real broker,
// runs the tests and stops the broker.
var integration func(m *testing.M) int

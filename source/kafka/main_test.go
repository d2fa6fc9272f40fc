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
	goleak.VerifyTestMain(m)
}

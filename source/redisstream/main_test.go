package redisstream_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind. Started as a
// consumer process of TestKilledConsumerLosesNothing (killWorkerEnv set),
// it runs that consumer instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(killWorkerEnv) != "" {
		os.Exit(killWorker())
	}
	goleak.VerifyTestMain(m)
}

package ownership_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(ownedWorkerEnv) == "1" {
		os.Exit(ownedWorker())
	}
	// With the kafka build tag, against a real broker.
	os.Exit(testenv.RunTests(m, func(m *testing.M) int {
		goleak.VerifyTestMain(m)
		return 0
	}))
}

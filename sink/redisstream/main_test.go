package redisstream_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, goleakMain))
}

// goleakMain checks that no test leaves a goroutine behind.
func goleakMain(m *testing.M) int {
	goleak.VerifyTestMain(m)
	return 0
}

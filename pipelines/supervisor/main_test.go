package supervisor_test

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet discards the pipelines' logs.
var quiet = slog.New(slog.DiscardHandler)

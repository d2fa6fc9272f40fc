package main

import (
	"context"
	"strings"
	"testing"
)

// A shorter -stale-after than the scheduler's own policy allows (4 s: 4 ×
// its 1 s max_attempt_timeout) is accepted with a lower
// SLUICE_RETRY_DELIVERY_MAX_ATTEMPT_TIMEOUT, as docs/delivery.md says: the
// check is of the policy with its variables applied.
func TestWorkerStaleAfterFollowsTheMaxAttemptTimeoutVariable(t *testing.T) {
	t.Setenv("SLUICE_RETRY_DELIVERY_MAX_ATTEMPT_TIMEOUT", "500ms")
	ctx := context.Background()
	base := []string{"delivery", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1"}
	err := runWorker(ctx, append(base, "-stale-after", "2s"))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("-stale-after 2s with max_attempt_timeout 500ms: %v, want it accepted (an error from the unreachable broker)", err)
	}
	err = runWorker(ctx, append(base, "-stale-after", "1500ms"))
	if err == nil || !strings.Contains(err.Error(), "-stale-after 1.5s: must be at least 2s") ||
		!strings.Contains(err.Error(), "500ms longest attempt timeout") || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("-stale-after 1.5s with max_attempt_timeout 500ms: %v, want refused before connecting, naming 2s and 500ms", err)
	}
}

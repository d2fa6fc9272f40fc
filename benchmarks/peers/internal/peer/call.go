package peer

import (
	"context"
	"time"
)

// Call is each record's work: wait d on a timer, no CPU. It returns early
// with ctx's error when ctx ends.
func Call(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

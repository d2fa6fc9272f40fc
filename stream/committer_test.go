package stream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Committers calls every committer even when one fails, and joins the
// errors.
func TestCommittersOneFails(t *testing.T) {
	boom := errors.New("boom")
	var called [3]atomic.Bool
	c := stream.Committers(
		stream.CommitterFunc(func(context.Context) error { called[0].Store(true); return boom }),
		stream.CommitterFunc(func(context.Context) error { called[1].Store(true); return nil }),
		stream.CommitterFunc(func(context.Context) error { called[2].Store(true); return nil }),
	)
	if err := c.Commit(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	for i := range called {
		if !called[i].Load() {
			t.Fatalf("committer %d not called", i)
		}
	}
}

// A committer that hangs until the deadline (a level's broker gone) does
// not take the others' time: they commit at once.
func TestCommittersOneHangs(t *testing.T) {
	committed := make(chan struct{})
	c := stream.Committers(
		stream.CommitterFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }),
		stream.CommitterFunc(func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			default:
				close(committed)
				return nil
			}
		}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Commit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the hung one's deadline", err)
	}
	select {
	case <-committed:
	default:
		t.Fatal("the healthy committer did not commit: the hung one took the whole deadline")
	}
}

package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/stream"
)

// Each assignment of a partition is a stream.Assignment of its own, which
// ends when the partition is stopped: a window downstream keeps the
// assignments' messages apart and drops what it holds of one that ended.
func TestAssignedMessagesTellTheirAssignmentAndItsEnd(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 10, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	a := newAssigned(t, brokers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := func(int32, int64) bool { return true }
	r := runAssigned(t, ctx, a, hold)
	first := func() stream.Assignment {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.held[len(r.held)-1].Handle().Assignment()
	}
	a.Start(0, 0)
	waitFor(t, "the partition read", 20*time.Second, func() bool { return len(r.offsets(0)) == 10 })
	old := first()
	if old == nil {
		t.Fatal("a record's handle has no assignment")
	}
	select {
	case <-old.Ended():
		t.Fatal("the assignment ended while the partition is read")
	default:
	}
	a.Stop(0)
	select {
	case <-old.Ended():
	case <-time.After(10 * time.Second):
		t.Fatal("the assignment did not end when the partition was stopped")
	}
	r.reset(0)
	a.Start(0, 5)
	waitFor(t, "the partition read again", 20*time.Second, func() bool { return len(r.offsets(0)) == 5 })
	if again := first(); again == nil || again == old {
		t.Fatalf("the new assignment's records have assignment %v, the old one's %v: want a new one", again, old)
	}
	cancel()
	<-r.done
}

package flow_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// assignment is one assignment of a partition, as a Kafka source gives
// it (stream.Assignment): the settler of its messages, and a channel
// closed when the partition is taken away.
type assignment struct {
	*stream.Tracker
	ended chan struct{}
}

func newAssignment(first int64) *assignment {
	return &assignment{Tracker: stream.NewTracker(first), ended: make(chan struct{})}
}

func (a *assignment) Ended() <-chan struct{} { return a.ended }

// message returns the next message of the assignment, at offset off,
// arriving at its event time.
func (a *assignment) message(off int64, r reading) stream.Message[reading] {
	m := stream.NewMessage(r, stream.NewHandle(a, a.Track().ID()))
	m.Offset, m.Timestamp = off, r.event
	return m
}

// A partition read up to offset 2, lost to another owner, and regained
// at that owner's checkpoint, offset 10: the new assignment starts past
// the old one's last offset. Its window must hold its own messages only:
// a pane claiming offsets 0 to 11 would hold 5 readings of the 12 and,
// having the lowest first offset, replace the other owner's complete one.
func TestTumblingKeepsAReassignmentThatStartsPastTheOldOnesWindowsApart(t *testing.T) {
	old, again := newAssignment(0), newAssignment(10)
	msgs := []stream.Message[reading]{
		old.message(0, reading{"a", at(0, 0), 1}),
		old.message(1, reading{"a", at(0, 5), 1}),
		old.message(2, reading{"a", at(0, 10), 1}),
		again.message(10, reading{"a", at(0, 40), 1}),
		again.message(11, reading{"a", at(0, 50), 1}),
	}
	src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
		for _, m := range msgs {
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, src), sumWindow()), out)
	run(t, g)
	ws := out.windows()
	if len(ws) != 1 || ws[0].Count != 2 || ws[0].FirstOffset != 10 || len(ws[0].Panes) != 1 ||
		ws[0].Panes[0].Count != 2 || ws[0].Panes[0].FirstOffset != 10 || ws[0].Panes[0].Value != (agg{2, 2}) {
		t.Fatalf("windows %+v, want one of offsets 10 and 11 alone", ws)
	}
	if st := old.Stats(); st.Total() != 0 {
		t.Fatalf("the old assignment's messages were settled: %+v", st)
	}
	if st := again.Stats(); st.Settled[stream.Completed] != 2 || st.Duplicates != 0 || again.Watermark() != 12 {
		t.Fatalf("new assignment: %+v, watermark %d", st, again.Watermark())
	}
}

// Once a partition's assignment has ended (the partition moved to
// another owner, which replays what this one left unsettled), its open
// windows are dropped at once, unsettled, and not emitted: not by the
// idle close, not at the end of the input, and not kept in memory until
// the partition comes back.
func TestTumblingDropsTheWindowsOfAnAssignmentThatEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAssignment(0)
		ended := a.ended
		released := make(chan struct{})
		var asked atomic.Int32
		var settler weak.Pointer[assignment]
		src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
			// Only the window (and the test's channel) keeps the
			// assignment: once it lets go, the settler is garbage.
			settler = weak.Make(a)
			for off := range int64(3) {
				if err := out.Send(ctx, a.message(off, reading{"a", at(0, int(10*off)), 1})); err != nil {
					return err
				}
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			a = nil
			select {
			case <-released:
			case <-ctx.Done():
			}
			return nil
		})
		g := stream.New()
		out := &windowSink{}
		held := func(string, int32, int) bool { asked.Add(1); return true }
		stream.To(stream.Via(stream.From(g, src), sumWindow(flow.IdleClose(2*time.Second), flow.IdleWhenHeld(held))), out)
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		synctest.Wait()
		close(ended)
		synctest.Wait()
		time.Sleep(5 * time.Second) // past the idle close
		synctest.Wait()
		idle, n := out.windows(), asked.Load()
		for range 3 { // the pipes' pooled batches go within two cycles
			runtime.GC()
		}
		kept := settler.Value() != nil
		close(released)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(idle) != 0 {
			t.Fatalf("the windows of an assignment that ended were emitted by the idle close: %+v", idle)
		}
		if n != 0 {
			t.Fatalf("IdleWhenHeld asked %d times about a partition no longer read", n)
		}
		if kept {
			t.Fatal("the window still holds the ended assignment's messages")
		}
		if ws := out.windows(); len(ws) != 0 {
			t.Fatalf("the windows of an assignment that ended were emitted at the end of the input: %+v", ws)
		}
	})
}

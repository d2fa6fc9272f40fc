package flow_test

import (
	"context"
	"maps"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// Delay lets go of the messages it holds for an assignment that ended (the
// partition was revoked or lost: whoever reads it now replays them), as a
// window does: they are not handed on, not settled, and do not hold back
// the partition's messages of its next assignment. Found in review: a
// parked replay held when its partition moved to another worker was
// handed on at its time all the same — run by two workers at once, and
// parked twice if it failed again (each rebalance of an outage multiplying
// the copies) — and the partition, given back, waited behind it.
func TestDelayDropsTheMessagesOfAnAssignmentThatEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		old, again := newAssignment(0), newAssignment(0)
		src := takenAwayAndGivenBack(start, old, again)
		at := map[int]time.Duration{}
		g := stream.New()
		s := stream.Via(stream.From(g, src), flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp }))
		stream.To(s, sink.Func(func(_ context.Context, v int) error { at[v] = time.Since(start); return nil }))
		run(t, g)
		if want := map[int]time.Duration{2: 2 * time.Second}; !maps.Equal(at, want) {
			t.Fatalf("handed on at %v, want %v: the ended assignment's message dropped, the next one's at once", at, want)
		}
		if st := old.Stats(); st.Total() != 0 {
			t.Fatalf("the ended assignment's message was settled: %+v", st)
		}
	})
}

// takenAwayAndGivenBack sends message 1 of assignment old, due a minute
// after start; one second later old ends (the partition is taken away),
// and one second after that it sends message 2 of again, due at start
// (the partition given back).
func takenAwayAndGivenBack(start time.Time, old, again *assignment) stream.Source[int] {
	msg := func(a *assignment, v int, due time.Duration) stream.Message[int] {
		m := stream.NewMessage(v, stream.NewHandle(a, a.Track().ID()))
		m.Topic, m.Partition, m.Timestamp = "retry", 0, start.Add(due)
		return m
	}
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		if err := out.Send(ctx, msg(old, 1, time.Minute)); err != nil {
			return err
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
		time.Sleep(time.Second)
		close(old.ended)
		time.Sleep(time.Second)
		return out.Send(ctx, msg(again, 2, 0))
	})
}

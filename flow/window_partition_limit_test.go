package flow_test

import (
	"context"
	"testing"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// A window behind a backpressure.PartitionLimit (whose doc says to put it
// right after the source) keeps the assignments of a partition apart as it
// does right after the source: PartitionLimit gives each message a handle
// of its own, and the assignment must still be that of the handle it wraps.
// Found in review: Handle.Assignment saw through Fanout and Join only, so
// behind a PartitionLimit every message had none and "all belong to one":
// the window summed the old assignment's readings with the new one's (a
// pane claiming offsets 0 to 11 with 5 readings, which Pane's rule takes
// for the complete one over the other owner's), and settled the old
// assignment's messages with it.
func TestTumblingBehindAPartitionLimitKeepsAssignmentsApart(t *testing.T) {
	old, again := newAssignment(0), newAssignment(10)
	msgs := []stream.Message[reading]{
		old.message(0, reading{"a", at(0, 0), 1}),
		old.message(1, reading{"a", at(0, 5), 1}),
		old.message(2, reading{"a", at(0, 10), 1}),
		again.message(10, reading{"a", at(0, 40), 1}),
		again.message(11, reading{"a", at(0, 50), 1}),
	}
	src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
		for i, m := range msgs {
			if i == 3 {
				close(old.ended) // the partition was taken away, then given back
			}
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	out := &windowSink{}
	limited := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[reading](100, 0))
	stream.To(stream.Via(limited, sumWindow()), out)
	run(t, g)
	ws := out.windows()
	if len(ws) != 1 || ws[0].Count != 2 || ws[0].FirstOffset != 10 || len(ws[0].Panes) != 1 ||
		ws[0].Panes[0].Count != 2 || ws[0].Panes[0].FirstOffset != 10 || ws[0].Panes[0].Value != (agg{2, 2}) {
		t.Fatalf("windows %+v, want one of offsets 10 and 11 alone", ws)
	}
	if st := old.Stats(); st.Total() != 0 {
		t.Fatalf("the old assignment's messages were settled: %+v", st)
	}
}

// Handle.Assignment sees through the handle PartitionLimit gives a message.
func TestPartitionLimitKeepsTheAssignment(t *testing.T) {
	a := newAssignment(0)
	var got []stream.Assignment
	src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
		return out.Send(ctx, a.message(0, reading{"a", at(0, 0), 1}))
	})
	g := stream.New()
	limited := stream.Via(stream.From(g, src), backpressure.NewPartitionLimit[reading](1, 0))
	stream.To(limited, stream.SinkFunc[reading](func(ctx context.Context, in *stream.Inlet[reading]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				got = append(got, b.Items[i].Handle().Assignment())
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
		}
	}))
	run(t, g)
	if len(got) != 1 || got[0] != stream.Assignment(a) {
		t.Fatalf("assignments %v behind a PartitionLimit, want the source's %p", got, a)
	}
}

package flow_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// A message of an ended assignment that comes after the partition's new
// assignment's messages is dropped (the next reader replays it), and the
// new, live assignment's open windows stay. Found in review: it made the
// window drop the live assignment's windows (it reset the partition's
// state for any other assignment, ended or not, then forgot it); those
// messages were neither emitted nor settled, and their assignment never
// ends: the partition's offsets stayed uncommitted from the first of them
// on (the source's unsettled count growing until MaxUnsettledPerPartition
// paused the partition for good), and the window rebuilt from the next
// message claimed a FirstOffset and Count that left them out.
//
// An old message comes after new ones whenever a stage before the window
// does not keep order across messages: here MapAsync (unordered, the
// default) whose call for the old assignment's last message is slow.
func TestLateMessageOfAnEndedAssignmentKeepsTheLiveOnesWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old, again := newAssignment(0), newAssignment(10)
		src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
			send := func(ms ...stream.Message[reading]) error {
				for _, m := range ms {
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
				return out.Flush(ctx)
			}
			// The partition is read up to offset 2, then taken away...
			if err := send(old.message(0, reading{"a", at(0, 0), 0}), old.message(1, reading{"a", at(0, 5), 0}),
				old.message(2, reading{"a", at(0, 10), 1})); err != nil {
				return err
			}
			close(old.ended)
			// ... and given back at another owner's checkpoint, 10.
			if err := send(again.message(10, reading{"a", at(0, 20), 0}), again.message(11, reading{"a", at(0, 25), 0}),
				again.message(12, reading{"a", at(0, 30), 0})); err != nil {
				return err
			}
			time.Sleep(5 * time.Second) // the slow call of offset 2 ends meanwhile
			return send(again.message(13, reading{"a", at(0, 35), 0}))
		})
		// Parsing, enrichment: any stage that lets a slow message fall behind.
		enrich := flow.MapAsync(4, func(_ context.Context, r reading) (reading, error) {
			if r.v == 1 {
				time.Sleep(2 * time.Second)
			}
			return r, nil
		})
		g := stream.New()
		out := &windowSink{}
		stream.To(stream.Via(stream.Via(stream.From(g, src), enrich), sumWindow()), out)
		run(t, g)
		ws := out.windows()
		if st := old.Stats(); st.Total() != 0 {
			t.Errorf("the ended assignment's messages were settled: %+v", st)
		}
		if len(ws) != 1 || ws[0].FirstOffset != 10 || ws[0].Count != 4 {
			t.Errorf("windows %+v, want one holding the new assignment's offsets 10 to 13", ws)
		}
		if st := again.Stats(); again.Watermark() != 14 {
			t.Errorf("the live assignment's messages: %+v, watermark %d: offsets from %d on can never be committed "+
				"(neither emitted nor settled, and their assignment has not ended)", st, again.Watermark(), again.Watermark())
		}
	})
}

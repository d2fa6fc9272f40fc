package stream_test

import (
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

type testAssignment struct {
	*stream.Tracker
	ended chan struct{}
}

func (a *testAssignment) Ended() <-chan struct{} { return a.ended }

// A message split (Fanout) or joined with others of its assignment (Join)
// still tells which assignment it was read under; one joined with
// another assignment's, or from a source without assignments, tells none.
func TestHandleAssignmentThroughFanoutAndJoin(t *testing.T) {
	a := &testAssignment{Tracker: stream.NewTracker(0), ended: make(chan struct{})}
	b := &testAssignment{Tracker: stream.NewTracker(0), ended: make(chan struct{})}
	ha := func() stream.Handle { return stream.NewHandle(a, a.Track().ID()) }
	hb := stream.NewHandle(b, b.Track().ID())
	plain := stream.NewTracker(0)
	for name, c := range map[string]struct {
		h    stream.Handle
		want stream.Assignment
	}{
		"direct":              {ha(), a},
		"fanout":              {stream.Fanout(ha(), 3), a},
		"fanout of fanout":    {stream.Fanout(stream.Fanout(ha(), 2), 2), a},
		"join of one":         {stream.Join([]stream.Handle{ha(), ha(), {}}), a},
		"join of a fanout":    {stream.Join([]stream.Handle{stream.Fanout(ha(), 2), ha()}), a},
		"join of two":         {stream.Join([]stream.Handle{ha(), hb}), nil},
		"join with plain":     {stream.Join([]stream.Handle{ha(), plain.Track()}), nil},
		"plain tracker":       {plain.Track(), nil},
		"zero handle":         {stream.Handle{}, nil},
		"fanout of the plain": {stream.Fanout(plain.Track(), 2), nil},
	} {
		if got := c.h.Assignment(); got != c.want {
			t.Errorf("%s: assignment %v, want %v", name, got, c.want)
		}
	}
}

package flow_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// Paying customers high (0), free ones low (2); a tier nobody knows fails
// its message to the failure stream with the reason, and a level out of
// range is never taken for high.
func TestPrioritizeSetsTheLevelAndFailsUnknownOnes(t *testing.T) {
	tiers := map[string]int{"paying": 0, "free": 2, "weird": 7}
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"paying", "free", "weird", "unknown"}, source.Track(tr))),
		flow.Prioritize(3, func(tier string) (int, error) {
			l, ok := tiers[tier]
			if !ok {
				return 0, errors.New("no tier " + tier)
			}
			return l, nil
		}))
	c := sink.Collect[string]()
	stream.To(s, c)
	var reasons []error
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		reasons = append(reasons, m.Value.Err)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint8{}
	for _, m := range c.Messages() {
		got[m.Value] = m.Priority
	}
	if len(got) != 2 || got["paying"] != 0 || got["free"] != 2 {
		t.Fatalf("levels %v, want paying 0, free 2", got)
	}
	if len(reasons) != 2 || !errors.Is(reasons[0], flow.ErrPriorityOutOfRange) && !errors.Is(reasons[1], flow.ErrPriorityOutOfRange) {
		t.Fatalf("failures %v, want the out-of-range level and the unknown tier", reasons)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 2 {
		t.Fatalf("settled %+v", st.Settled)
	}
}

func TestPrioritizeConfigErrors(t *testing.T) {
	for arg, f := range map[string]stream.Flow[int, int]{
		"level":  flow.Prioritize[int](3, nil),
		"levels": flow.Prioritize(0, func(int) (int, error) { return 0, nil }),
	} {
		g := stream.New()
		stream.To(stream.Via(stream.From(g, source.Slice([]int{1})), f), sink.Discard[int]())
		var ce *stream.ConfigError
		if err := g.Run(context.Background()); !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "prioritize" {
			t.Errorf("%s: %v", arg, err)
		}
	}
}

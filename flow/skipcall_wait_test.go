package flow_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// keyedAt0 sends vs at level 0, each keyed by keyOf(v).
func keyedAt0(vs []int, keyOf func(int) string) stream.Source[int] {
	return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for _, v := range vs {
			m := stream.NewMessage(v, stream.Handle{})
			m.Key = []byte(keyOf(v))
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// A message SkipCall answers needs no call slot: it must not wait for
// one behind the calls in flight and the messages queued for a slot (a
// replay that skips the steps it did would otherwise queue at each of
// them behind a whole window of fresh work). It still waits for its key
// (ByMessageKey) and, InOrder, leaves in input order.
//
// One slot, held by message 0's call until released, in a window of 16;
// then 1 to 3 need a call, 4 to 6 none. Before the release, 4 to 6 must
// be out (in an unordered stage, with or without lanes, and keyed with
// keys of their own), and a skipped message of message 0's key must not.
func TestSkipCallWaitsForNoSlot(t *testing.T) {
	cases := []struct {
		name  string
		opts  []flow.AsyncOption
		keyOf func(int) string
		early []int // out before 0's call returns
	}{
		{"unordered", nil, strconv.Itoa, []int{4, 5, 6}},
		{"lanes", []flow.AsyncOption{flow.Lanes(backpressure.StrictPriority(2))}, strconv.Itoa, []int{4, 5, 6}},
		{"keyed", []flow.AsyncOption{flow.ByMessageKey()}, strconv.Itoa, []int{4, 5, 6}},
		// 6 shares 0's key: it waits for 0's call, 4 and 5 do not.
		{"keyed_shared", []flow.AsyncOption{flow.ByMessageKey(), flow.Lanes(backpressure.StrictPriority(2))},
			func(v int) string { return strconv.Itoa(v % 6) }, []int{4, 5}},
		{"in_order", []flow.AsyncOption{flow.InOrder()}, strconv.Itoa, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				opts := append([]flow.AsyncOption{flow.Window(16), flow.SkipCall(func(x int) (int, bool) { return x, x >= 4 })}, c.opts...)
				a := flow.MapAsync(1, func(ctx context.Context, x int) (int, error) {
					if x == 0 {
						<-release
					}
					return x, nil
				}, opts...)
				g := stream.New()
				out := sink.Collect[int]()
				stream.To(stream.Via(stream.From(g, keyedAt0([]int{0, 1, 2, 3, 4, 5, 6}, c.keyOf)), a), out)
				done := make(chan error, 1)
				go func() { done <- g.Run(context.Background()) }()
				synctest.Wait()
				early := out.Values()
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				slices.Sort(early)
				if !slices.Equal(early, c.early) && !(len(early) == 0 && len(c.early) == 0) {
					t.Errorf("out while message 0's call held the only slot: %v, want %v", early, c.early)
				}
				all := out.Values()
				if c.name == "in_order" && !slices.Equal(all, []int{0, 1, 2, 3, 4, 5, 6}) {
					t.Errorf("in order: %v", all)
				}
				if len(all) != 7 {
					t.Errorf("%d messages out of 7: %v", len(all), all)
				}
				if st := a.Stats(); st.Skipped != 3 || st.Calls != 4 {
					t.Errorf("stats: %d skipped, %d calls; want 3 and 4", st.Skipped, st.Calls)
				}
			})
		})
	}
}

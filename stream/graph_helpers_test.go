package stream_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func TestMergeKeepsPerInputOrder(t *testing.T) {
	ta, tb := stream.NewTracker(0), stream.NewTracker(0)
	g := stream.New()
	a := stream.From(g, source.Slice(ints(5000), source.Track(ta)))
	b := stream.Via(stream.From(g, source.Slice(ints(5000), source.Track(tb))),
		flow.Map(func(x int) (int, error) { return -x - 1, nil }))
	out := sink.Collect[int]()
	stream.To(stream.Merge(a, b), out)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pos, neg []int
	for _, v := range out.Values() {
		if v >= 0 {
			pos = append(pos, v)
		} else {
			neg = append(neg, -v-1)
		}
	}
	if !slices.Equal(pos, ints(5000)) || !slices.Equal(neg, ints(5000)) {
		t.Fatal("merge lost messages or reordered an input")
	}
	checkSettled(t, ta, map[stream.Outcome]int64{stream.Completed: 5000})
	checkSettled(t, tb, map[stream.Outcome]int64{stream.Completed: 5000})
}

func TestBroadcastSettlesWhenAllCopiesSettle(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	outs := stream.Broadcast(stream.From(g, source.Slice(ints(3000), source.Track(tr))), 3)
	all := sink.Collect[int]()
	stream.To(outs[0], all)
	evens := sink.Collect[int]()
	stream.To(stream.Via(outs[1], flow.Filter(func(x int) bool { return x%2 == 0 })), evens)
	failing := stream.Via(outs[2], flow.Map(func(x int) (int, error) {
		if x == 7 {
			return 0, errors.New("seven")
		}
		return x, nil
	}))
	stream.To(failing, sink.Discard[int]())
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all.Values(), ints(3000)) || len(evens.Values()) != 1500 {
		t.Fatalf("copies: %d all, %d evens", len(all.Values()), len(evens.Values()))
	}
	// Each message settles once, with the most severe outcome of its copies.
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 2999, stream.DeadLettered: 1})
}

func TestRouteAndSplit(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	outs, errs := stream.Route(stream.From(g, source.Slice(ints(1000), source.Track(tr))), 3,
		func(x int) (int, error) {
			switch {
			case x == 500:
				return 0, errors.New("unroutable")
			case x == 501:
				return 7, nil
			case x == 502:
				panic("bad key")
			}
			return x % 3, nil
		})
	cols := make([]*sink.Collector[int], 3)
	for i := range cols {
		cols[i] = sink.Collect[int]()
	}
	stream.To(outs[0], cols[0])
	stream.To(outs[1], cols[1])
	small, big := stream.Split(outs[2], func(x int) bool { return x < 100 })
	stream.To(small, cols[2])
	stream.To(big, sink.Discard[int]())
	var reasons []string
	stream.To(errs, sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		reasons = append(reasons, m.Value.Err.Error())
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		for _, v := range cols[i].Values() {
			if v%3 != i {
				t.Fatalf("%d routed to %d", v, i)
			}
		}
	}
	for _, v := range cols[2].Values() {
		if v%3 != 2 || v >= 100 {
			t.Fatalf("%d split wrongly", v)
		}
	}
	slices.Sort(reasons)
	if len(reasons) != 3 || !strings.Contains(reasons[0], "panic") || !strings.Contains(reasons[1], "out of range") ||
		reasons[2] != "unroutable" {
		t.Fatalf("side output reasons %q", reasons)
	}
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 997, stream.DeadLettered: 3})
}

func TestSlowSinkStopsSourceWithBoundedMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		gate := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		const capacity, batch = 1024, 256
		g := stream.New(stream.WithCapacity(capacity), stream.WithBatchSize(batch))
		s := stream.From(g, source.Generator(func(i int64) int64 { return i }, source.Track(tr)))
		s = stream.Via(s, flow.Map(func(x int64) (int64, error) { return x, nil }))
		stream.To(s, sink.Func(func(ctx context.Context, _ int64) error {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil
		}))
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		synctest.Wait()
		// An endless source and a stalled sink: every stage is blocked and
		// at most two pipes of capacity plus a batch in each stage's hands
		// are in flight.
		if p := tr.Pending(); p > 2*capacity+3*batch {
			t.Fatalf("%d messages in flight: memory not bounded", p)
		}
		close(gate)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		checkSettled(t, tr, nil)
	})
}

func TestStageEndingEarlyStopsUpstream(t *testing.T) {
	g := stream.New()
	s := stream.From(g, source.Generator(func(i int64) int64 { return i }))
	stream.To(s, stream.SinkFunc[int64](func(ctx context.Context, in *stream.Inlet[int64]) error {
		b, err := in.Recv(ctx)
		if err != nil {
			return err
		}
		b.Release()
		return nil // stops reading with its input still open
	}), stream.Name("quitter"))
	err := g.Run(context.Background())
	if !errors.Is(err, stream.ErrDownstreamClosed) {
		t.Fatalf("Run = %v, want ErrDownstreamClosed", err)
	}
}

func TestStatsCountEachStage(t *testing.T) {
	g := stream.New(stream.WithLogger(newTextLogger(io.Discard)))
	s := stream.Via(stream.From(g, source.Slice(ints(1000))), flow.Filter(func(x int) bool { return x%4 != 0 }), stream.Name("keep"))
	s = stream.Via(s, flow.Map(func(x int) (int, error) {
		if x%4 == 1 {
			return 0, errors.New("no")
		}
		return x, nil
	}), stream.Name("check"))
	stream.To(s, sink.Discard[int](), stream.Name("out"))
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() { // Stats is safe while Run prepares and runs
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
				_ = g.Stats()
			}
		}
	}()
	err := g.Run(context.Background())
	close(stop)
	<-polled
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]stream.StageStats{}
	for _, st := range g.Stats() {
		got[st.Name] = st
	}
	want := map[string][5]int64{ // in, out, settled, failed, buffered
		"slice":       {0, 1000, 0, 0, 0},
		"keep":        {1000, 750, 250, 0, 0},
		"check":       {750, 500, 0, 250, 0},
		"out":         {500, 0, 500, 0, 0},
		"dead-letter": {250, 0, 250, 0, 0},
	}
	for name, w := range want {
		st := got[name]
		if [5]int64{st.In, st.Out, st.Settled, st.Failed, st.Buffered} != w || st.InFlight() != 0 {
			t.Errorf("%s: %+v, want in/out/settled/failed/buffered %v", name, st, w)
		}
	}
}

// A stage waiting for input holds nothing: what it settled before it went
// idle — a filter's drops, a sink's writes, settles a sink makes from
// another goroutine once a write is acknowledged — counts at once, not
// when the next batch comes (a live status page showed a dead-letter
// sink "in flight" long after its last write).
func TestIdleStagesHoldNothingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := stream.NewTracker(0)
		ch := make(chan int)
		ctx, cancel := context.WithCancel(context.Background())
		g := stream.New()
		s := stream.Via(stream.From(g, source.Channel(ch, source.Track(tr))), flow.Filter(func(x int) bool { return x%3 != 0 }),
			stream.Name("keep"))
		outs := stream.Broadcast(s, 2)
		stream.To(outs[0], sink.Discard[int](), stream.Name("sync"))
		stream.To(outs[1], stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
			for {
				b, err := in.Recv(ctx)
				if err != nil {
					return nil
				}
				for _, m := range b.Items {
					go in.SettleAsync(&m, stream.Completed) // as a client's callback would
				}
				b.Release()
			}
		}), stream.Name("async"))
		done := make(chan error)
		go func() { done <- g.Run(ctx) }()
		for i := range 10 {
			ch <- i
		}
		synctest.Wait()
		for _, st := range g.Stats() {
			if st.InFlight() != 0 {
				t.Errorf("%s, idle: %d in flight (in %d, out %d, settled %d)", st.Name, st.InFlight(), st.In, st.Out, st.Settled)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := tr.Stats(); st.Total() != 10 || st.Duplicates != 0 {
			t.Fatalf("settled %+v, want the 10 messages once each", st)
		}
	})
}

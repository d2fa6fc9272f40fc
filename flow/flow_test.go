package flow_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func ints(n int) []int {
	vs := make([]int, n)
	for i := range vs {
		vs[i] = i
	}
	return vs
}

func run(t *testing.T, g *stream.Graph) {
	t.Helper()
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func checkSettled(t *testing.T, tr *stream.Tracker) stream.TrackerStats {
	t.Helper()
	st := tr.Stats()
	if st.Duplicates != 0 || st.Total() != st.Issued || tr.Watermark() != st.Issued {
		t.Fatalf("settle contract broken: %+v, watermark %d", st, tr.Watermark())
	}
	return st
}

func TestFlatMapSettlesInputWhenAllOutputsSettle(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.From(g, source.Slice(ints(1000), source.Track(tr)))
	words := stream.Via(s, flow.FlatMap(func(x int) ([]string, error) {
		if x%4 == 0 {
			return nil, nil // nothing: settled as filtered
		}
		if x%4 == 1 {
			return nil, errors.New("odd one")
		}
		return []string{fmt.Sprint(x), fmt.Sprint(-x)}, nil
	}))
	out := sink.Collect[string]()
	stream.To(words, out)
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
	run(t, g)
	if n := len(out.Values()); n != 1000 {
		t.Fatalf("collected %d, want 1000", n)
	}
	st := checkSettled(t, tr)
	if st.Settled[stream.Completed] != 500 || st.Settled[stream.Filtered] != 250 || st.Settled[stream.DeadLettered] != 250 {
		t.Fatalf("outcomes %+v", st.Settled)
	}
}

func TestBatchBySize(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice(ints(1003), source.Track(tr))), flow.Batch[int](10, 0))
	out := sink.Collect[[]int]()
	stream.To(s, out)
	run(t, g)
	batches := out.Values()
	if len(batches) != 101 || len(batches[100]) != 3 {
		t.Fatalf("%d batches, last of %d", len(batches), len(batches[len(batches)-1]))
	}
	var all []int
	for _, b := range batches[:100] {
		if len(b) != 10 {
			t.Fatalf("batch of %d", len(b))
		}
	}
	for _, b := range batches {
		all = append(all, b...)
	}
	if !slices.Equal(all, ints(1003)) {
		t.Fatal("batches lost or reordered values")
	}
	if out.Messages()[1].Offset != 10 {
		t.Fatalf("batch envelope offset %d, want its first message's 10", out.Messages()[1].Offset)
	}
	checkSettled(t, tr)
}

func TestBatchByTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int)
		g := stream.New()
		s := stream.Via(stream.From(g, source.Channel(ch)), flow.Batch[int](100, time.Second))
		out := sink.Collect[[]int]()
		stream.To(s, out)
		done := make(chan error)
		go func() { done <- g.Run(context.Background()) }()
		for i := range 3 {
			ch <- i
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := len(out.Values()); n != 0 {
			t.Fatalf("batch emitted before maxWait: %d", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := out.Values(); len(got) != 1 || !slices.Equal(got[0], []int{0, 1, 2}) {
			t.Fatalf("after maxWait: %v", got)
		}
		ch <- 3
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := out.Values(); len(got) != 2 || !slices.Equal(got[1], []int{3}) {
			t.Fatalf("at end of input: %v", got)
		}
	})
}

func TestThrottleHoldsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := stream.New()
		s := stream.Via(stream.From(g, source.Slice(ints(100))), flow.Throttle[int](10, 1))
		out := sink.Collect[int]()
		stream.To(s, out)
		start := time.Now()
		run(t, g)
		// 100 messages at 10/s with a burst of 1: the first passes at once,
		// each next one 100 ms later (fake time: exact).
		if el := time.Since(start); el != 9900*time.Millisecond {
			t.Fatalf("took %v of fake time, want 9.9s", el)
		}
		if !slices.Equal(out.Values(), ints(100)) {
			t.Fatal("throttle lost or reordered messages")
		}
	})
}

func TestDelayHoldsUntilDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 3 {
				m := stream.NewMessage(i, stream.Handle{})
				m.Timestamp = start.Add(time.Duration(i) * time.Second)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		var at []time.Duration
		g := stream.New()
		s := stream.Via(stream.From(g, src), flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp.Add(time.Minute) }))
		stream.To(s, sink.Func(func(context.Context, int) error { at = append(at, time.Since(start)); return nil }))
		run(t, g)
		want := []time.Duration{time.Minute, time.Minute + time.Second, time.Minute + 2*time.Second}
		if !slices.Equal(at, want) {
			t.Fatalf("released at %v, want %v", at, want)
		}
	})
}

// A pipeline asked to stop while Delay holds messages not yet due ends at
// once, without waiting out the drain timeout: the held messages stay
// unsettled and are replayed; the ones already due are handed on.
func TestDelayLetsGoOfWaitingMessagesOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := stream.NewTracker(0)
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 4 {
				m := stream.NewMessage(i, tr.Track())
				m.Timestamp = start.Add(time.Duration(i-1) * time.Hour) // 0 and 1 are due, 2 and 3 later
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
		g := stream.New(stream.WithDrainTimeout(time.Minute))
		s := stream.Via(stream.From(g, src), flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp }))
		out := sink.Collect[int]()
		stream.To(s, out)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil: a delay's waiting messages are not work in flight", err)
		}
		if got := out.Values(); !slices.Equal(got, []int{0, 1}) {
			t.Fatalf("handed on %v, want the due ones [0 1]", got)
		}
		if st := tr.Stats(); st.Total() != 2 || tr.Watermark() != 2 {
			t.Fatalf("settled %d, watermark %d: the two waiting messages must stay unsettled", st.Total(), tr.Watermark())
		}
	})
}

// A message due later holds back only its own partition: another
// partition's messages go on when due. (Found in review: one parked
// compensation due in 10 minutes held back the replays of every partition
// of the retry topic.)
func TestDelayHoldsBackOnlyItsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := releasedAt(t, []dueIn{{0, 1, 10 * time.Minute}, {0, 2, 0}, {1, 3, time.Second}, {1, 4, 0}})
		want := map[int]time.Duration{1: 10 * time.Minute, 2: 10 * time.Minute, 3: time.Second, 4: time.Second}
		if !maps.Equal(at, want) {
			t.Fatalf("released at %v, want %v (partition 1 on its own time, each partition in order)", at, want)
		}
	})
}

// dueIn is a message for releasedAt: its partition, value and delay.
type dueIn struct {
	partition int32
	v         int
	due       time.Duration
}

// releasedAt sends ms through a Delay (with opts) that holds each until
// its delay from now has passed, and returns when each came out; in a
// synctest bubble.
func releasedAt(t *testing.T, ms []dueIn, opts ...flow.DelayOption) map[int]time.Duration {
	t.Helper()
	start := time.Now()
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		for _, d := range ms {
			m := stream.NewMessage(d.v, stream.Handle{})
			m.Topic, m.Partition, m.Timestamp = "retry", d.partition, start.Add(d.due)
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	at := map[int]time.Duration{}
	g := stream.New()
	s := stream.Via(stream.From(g, src), flow.Delay[int](func(e *stream.Envelope) time.Time { return e.Timestamp }, opts...))
	stream.To(s, sink.Func(func(_ context.Context, v int) error { at[v] = time.Since(start); return nil }))
	run(t, g)
	return at
}

// Recheck asks due again for the messages held: parked work whose cause
// is gone (a service back up) goes on at once, not at its scheduled time;
// a message read after is asked when it arrives.
func TestDelayRecheckBringsMessagesForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var recovered atomic.Bool
		due := func(e *stream.Envelope) time.Time {
			if recovered.Load() {
				return time.Time{}
			}
			return e.Timestamp
		}
		more := make(chan struct{})
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for i := range 4 {
				m := stream.NewMessage(i, stream.Handle{})
				m.Partition, m.Timestamp = int32(i%2), start.Add(time.Hour)
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			if err := out.Flush(ctx); err != nil {
				return err
			}
			<-more
			m := stream.NewMessage(4, stream.Handle{})
			m.Timestamp = start.Add(time.Hour)
			return out.Send(ctx, m)
		})
		recheck := make(chan struct{}, 1)
		at := map[int]time.Duration{}
		g := stream.New()
		s := stream.Via(stream.From(g, src), flow.Delay[int](due, flow.Recheck(recheck)))
		stream.To(s, sink.Func(func(_ context.Context, v int) error { at[v] = time.Since(start); return nil }))
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		time.Sleep(time.Second)
		recovered.Store(true)
		recheck <- struct{}{}
		time.Sleep(time.Second)
		close(more)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := map[int]time.Duration{0: time.Second, 1: time.Second, 2: time.Second, 3: time.Second, 4: 2 * time.Second}
		if !maps.Equal(at, want) {
			t.Fatalf("released at %v, want %v: the held at the recheck, the later one on arrival", at, want)
		}
	})
}

// FilterMessages decides on the envelope: here the offset, not the value.
func TestFilterMessagesDecidesOnTheEnvelope(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	vals := make([]string, 1000)
	for i := range vals {
		vals[i] = "same"
	}
	s := stream.Via(stream.From(g, source.Slice(vals, source.Track(tr))),
		flow.FilterMessages(func(m *stream.Message[string]) bool { return m.Offset%3 == 0 }))
	out := sink.Collect[string]()
	stream.To(s, out)
	run(t, g)
	if n := len(out.Values()); n != 334 {
		t.Fatalf("kept %d, want 334 (offsets divisible by 3)", n)
	}
	st := checkSettled(t, tr)
	if st.Settled[stream.Completed] != 334 || st.Settled[stream.Filtered] != 666 {
		t.Fatalf("outcomes %+v", st.Settled)
	}
	if err := flow.FilterMessages[int](nil).(stream.Validator).Validate(); err == nil {
		t.Fatal("a nil keep was accepted")
	}
}

// A Recheck channel that is closed asks due once more, not for ever:
// a closed channel is always ready, and Delay spun on it, asking due again
// for every message held, as fast as a core runs, until it stopped.
func TestDelayRecheckClosedChannelDoesNotSpin(t *testing.T) {
	var asked atomic.Int64
	due := func(*stream.Envelope) time.Time { asked.Add(1); return time.Now().Add(time.Hour) }
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		if err := out.Send(ctx, stream.NewMessage(1, stream.Handle{})); err != nil {
			return err
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	recheck := make(chan struct{})
	close(recheck)
	g := stream.New()
	stream.To(stream.Via(stream.From(g, src), flow.Delay[int](due, flow.Recheck(recheck))), sink.Func(func(context.Context, int) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	// Not a timing assertion: the count does not grow with the time given.
	deadline := time.Now().Add(10 * time.Second)
	for asked.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if n := asked.Load(); n < 1 || n > 2 {
		t.Fatalf("due asked %d times for one message held: want its arrival and at most one recheck", n)
	}
}

// With AnyOrder a message due later holds back nothing: each goes on at
// its own time, in its partition too.
func TestDelayAnyOrderLetsEachGoWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := releasedAt(t, []dueIn{{0, 1, 10 * time.Minute}, {0, 2, 0}, {0, 3, 2 * time.Second}, {0, 4, time.Second},
			{1, 5, 3 * time.Second}, {1, 6, time.Second}}, flow.AnyOrder())
		want := map[int]time.Duration{1: 10 * time.Minute, 2: 0, 3: 2 * time.Second, 4: time.Second, 5: 3 * time.Second, 6: time.Second}
		if !maps.Equal(at, want) {
			t.Fatalf("released at %v, want %v (each at its own time)", at, want)
		}
	})
}

package source_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// backlog runs a priority source over three levels of n messages each
// (the value says its level) that are all waiting before the first is
// served: the sink holds its first message until every level's source has
// sent everything, and one message at a time fits downstream. It returns
// the levels in the order they were served and the settles.
func backlog(t *testing.T, p backpressure.Priority, n int) ([]int, stream.TrackerStats) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New(stream.WithBatchSize(1), stream.WithCapacity(1))
	var sent sync.WaitGroup
	levels := make([]source.Level[int], 3)
	for l := range levels {
		vs := make([]int, n)
		for i := range vs {
			vs[i] = l
		}
		sent.Add(1)
		inner := source.Slice(vs, source.Track(tr))
		levels[l] = source.Level[int]{Name: []string{"high", "normal", "low"}[l], Source: stream.SourceFunc[int](
			func(ctx context.Context, out *stream.Outlet[int]) error {
				defer sent.Done()
				return inner.Run(ctx, out)
			})}
	}
	var got []int
	first := true
	stream.To(source.Priority(g, p, levels, stream.Buffer(n+1)), stream.SinkFunc[int](func(ctx context.Context, in *stream.Inlet[int]) error {
		for {
			b, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			if first {
				sent.Wait()
				first = false
			}
			for i := range b.Items {
				m := &b.Items[i]
				if int(m.Priority) != m.Value {
					t.Errorf("a message of level %d tagged %d", m.Value, m.Priority)
				}
				got = append(got, m.Value)
			}
			in.SettleAll(b.Items, stream.Completed)
			b.Release()
		}
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return got, tr.Stats()
}

func TestPrioritySourceStrict(t *testing.T) {
	const n = 200
	got, st := backlog(t, backpressure.StrictPriority(3), n)
	if len(got) != 3*n || st.Settled[stream.Completed] != 3*n {
		t.Fatalf("served %d, settled %+v; want %d each", len(got), st.Settled, 3*n)
	}
	// A few may pass before the backlog is complete (what fits downstream
	// while the sink waits); from then on, levels come strictly in order.
	const warm = 4
	for i := warm + 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("served level %d after %d at %d: %v", got[i], got[i-1], i, got[:min(len(got), 40)])
		}
	}
}

func TestPrioritySourceWeighted(t *testing.T) {
	const n = 300
	got, _ := backlog(t, backpressure.WeightedPriority(6, 3, 1), n)
	// While every level is backlogged (the first 300 picks take at most
	// 180 high), the shares are 6:3:1, give or take the warm-up.
	var c [3]int
	for _, l := range got[10:210] {
		c[l]++
	}
	if c[0] < 115 || c[0] > 125 || c[1] < 55 || c[1] > 65 || c[2] < 15 || c[2] > 25 {
		t.Fatalf("200 picks: %v, want about [120 60 20]", c)
	}
}

func TestPrioritySourceConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		p      backpressure.Priority
		levels []source.Level[int]
	}{
		"no levels":      {backpressure.StrictPriority(1), nil},
		"count mismatch": {backpressure.StrictPriority(3), []source.Level[int]{{Source: source.Slice([]int{1})}}},
		"bad policy":     {backpressure.WeightedPriority(0), []source.Level[int]{{Source: source.Slice([]int{1})}}},
		"no source":      {backpressure.StrictPriority(1), []source.Level[int]{{Name: "high"}}},
		"MaxWait 0":      {backpressure.StrictPriority(2).Aging(0, 0), []source.Level[int]{{Source: source.Slice([]int{1})}, {Source: source.Slice([]int{2})}}},
		"shared topic": {backpressure.StrictPriority(3), []source.Level[int]{{Name: "high", Source: &brokerLevel{topic: "deliveries"}},
			{Name: "normal", Source: &brokerLevel{topic: "deliveries-normal"}}, {Name: "low", Source: &brokerLevel{topic: "deliveries"}}}},
	} {
		g := stream.New()
		stream.To(source.Priority(g, c.p, c.levels), stream.SinkFunc[int](func(context.Context, *stream.Inlet[int]) error { return nil }))
		var ce *stream.ConfigError
		if err := g.Run(context.Background()); !errors.Is(err, stream.ErrInvalid) || !errors.As(err, &ce) || ce.Stage != "priority" {
			t.Errorf("%s: %v, want a ConfigError of stage priority", name, err)
		}
	}
}

// agedHead runs, in a synctest bubble (no time passes while the stage
// serves), a priority source over 50 high messages stamped now and 50 low
// ones stamped low(now), with AppendTime appended, under strict priority
// with aging (low's MaxWait 1 s), and returns the level that most of the
// picks 4..54 served (the first few pass before both backlogs are
// waiting) and the order served.
func agedHead(t *testing.T, low func(now time.Time) time.Time, appended bool) (head int, got []int) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		var ready sync.WaitGroup
		stamped := func(level, n int, ts time.Time, appended bool) stream.Source[int] {
			ready.Add(1)
			return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
				defer ready.Done()
				for range n {
					m := stream.NewMessage(level, stream.Handle{})
					m.Timestamp, m.AppendTime = ts, appended
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
				return nil
			})
		}
		g := stream.New(stream.WithBatchSize(1), stream.WithCapacity(1))
		levels := []source.Level[int]{
			{Name: "high", Source: stamped(0, 50, now, false)},
			{Name: "low", Source: stamped(1, 50, low(now), appended)},
		}
		first := true
		stream.To(source.Priority(g, backpressure.StrictPriority(2).Aging(0, time.Second), levels, stream.Buffer(64)),
			sink.Func(func(_ context.Context, v int) error {
				if first {
					ready.Wait()
					first = false
				}
				got = append(got, v)
				return nil
			}))
		if err := g.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != 100 {
		t.Fatalf("served %d messages, want 100", len(got))
	}
	if count(got[4:54], 1) > 25 {
		return 1, got
	}
	return 0, got
}

func count(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

// wrapped returns t plus 2^64 ns (rounded up to the second): a time past
// the year 2262 whose UnixNano wraps around to t (plus 0.29 s).
func wrapped(t time.Time) time.Time {
	const wrap = 18_446_744_074 // seconds: 2^64 ns is 18,446,744,073.7 s
	return time.Unix(t.Unix()+wrap, int64(t.Nanosecond()))
}

// A record whose Timestamp is its broker's append time (LogAppendTime)
// has waited since then: a backlog that waited 10 s at the broker has
// aged past low's MaxWait and is served before fresh high messages.
func TestPrioritySourceAgesFromTheBrokersAppendTime(t *testing.T) {
	if head, got := agedHead(t, func(now time.Time) time.Time { return now.Add(-10 * time.Second) }, true); head != 1 {
		t.Fatalf("low appended 10 s ago was not served first: %v", got[:20])
	}
}

// A timestamp the producer chose (CreateTime) says nothing of how long a
// message has waited: a producer whose clock is behind, a backfill of old
// data, or a time past 2262 (which UnixNano wraps to one that looks old)
// must not lift fresh low messages above high ones. Nor may a broker's
// append time that cannot be right: past 2262, or ahead of our clock.
func TestPrioritySourceTimestampsThatDoNotAge(t *testing.T) {
	for _, c := range []struct {
		name     string
		low      func(now time.Time) time.Time
		appended bool
	}{
		{"producer clock 10 s behind", func(now time.Time) time.Time { return now.Add(-10 * time.Second) }, false},
		{"backfill of last year's data", func(now time.Time) time.Time { return now.AddDate(-1, 0, 0) }, false},
		{"producer time past 2262", func(now time.Time) time.Time { return wrapped(now.Add(-time.Hour)) }, false},
		{"broker time past 2262", func(now time.Time) time.Time { return wrapped(now.Add(-time.Hour)) }, true},
		{"broker clock an hour ahead", func(now time.Time) time.Time { return now.Add(time.Hour) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if head, got := agedHead(t, c.low, c.appended); head != 0 {
				t.Fatalf("fresh low messages were served before high ones, as if aged: %v", got[:20])
			}
		})
	}
}

// The clock that ages messages is read at least once per output batch, so
// a downstream that holds every hand-over back does not leave it stale.
// (Found in review: read every 64 picks, with one message per batch and a
// 2 ms sink, a 20 ms MaxWait became 120-140 ms.) Fake time: synctest.
func TestPrioritySourceAgingClockKeepsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		stamped := func(level, n int, ts time.Time, after time.Duration) stream.Source[int] {
			return stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
				time.Sleep(after)
				for range n {
					m := stream.NewMessage(level, stream.Handle{})
					m.Timestamp = ts
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
				return nil
			})
		}
		g := stream.New(stream.WithBatchSize(1), stream.WithCapacity(1))
		levels := []source.Level[int]{
			{Name: "high", Source: stamped(0, 200, t0, 0)},
			// Sent once high's backlog is waiting (fake time moves only when
			// every goroutine waits): sent at once, it was served first when
			// it reached the stage before high's first (1 run in 4).
			{Name: "low", Source: stamped(1, 1, t0.Add(-time.Millisecond), time.Millisecond)},
		}
		var lowAt time.Duration
		stream.To(source.Priority(g, backpressure.StrictPriority(2).Aging(0, 20*time.Millisecond), levels, stream.Buffer(256)),
			sink.Func(func(_ context.Context, v int) error {
				if v == 1 {
					lowAt = time.Since(t0)
				}
				time.Sleep(2 * time.Millisecond)
				return nil
			}))
		if err := g.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Received at 1 ms (its producer's timestamp does not count), aged
		// at 21 ms; served within a few 2 ms services after.
		if lowAt < 21*time.Millisecond || lowAt > 30*time.Millisecond {
			t.Fatalf("the low message was served %v after the start, want soon after it aged (21 ms)", lowAt)
		}
	})
}

package flow_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// reading is one test event: a key, an event time and a value.
type reading struct {
	key   string
	event time.Time
	v     int
}

// rec is one record of a partitioned test log.
type rec struct {
	part    int32
	arrival time.Time
	r       reading
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(min, sec int) time.Time {
	return t0.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
}

// logSource emits recs, each with its partition's offset and a handle on
// that partition's tracker; if pause is set, it waits there after
// emitting recs[:pause.at] until release is closed.
type logSource struct {
	recs     []rec
	trackers map[int32]*stream.Tracker
	offsets  map[int32]int64
	pauseAt  int
	release  chan struct{}
}

func newLog(recs []rec) *logSource {
	return &logSource{recs: recs, trackers: map[int32]*stream.Tracker{}, offsets: map[int32]int64{}, pauseAt: -1}
}

func (l *logSource) tracker(p int32) *stream.Tracker {
	if l.trackers[p] == nil {
		l.trackers[p] = stream.NewTracker(0)
	}
	return l.trackers[p]
}

func (l *logSource) Run(ctx context.Context, out *stream.Outlet[reading]) error {
	for i, r := range l.recs {
		if i == l.pauseAt {
			if err := out.Flush(ctx); err != nil {
				return err
			}
			select {
			case <-l.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		m := stream.NewMessage(r.r, l.tracker(r.part).Track())
		m.Partition, m.Offset, m.Timestamp, m.Key = r.part, l.offsets[r.part], r.arrival, []byte(r.r.key)
		l.offsets[r.part]++
		if err := out.Send(ctx, m); err != nil {
			return err
		}
	}
	if l.pauseAt == len(l.recs) {
		if err := out.Flush(ctx); err != nil {
			return err
		}
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

type agg struct{ n, sum int }

func sumWindow(opts ...flow.WindowOption) stream.Flow[reading, flow.Windows[string, agg]] {
	return flow.Tumbling(time.Minute,
		func(m *stream.Message[reading]) string { return m.Value.key },
		func(r *reading) time.Time { return r.event },
		func(a *agg, r *reading) { a.n++; a.sum += r.v }, opts...)
}

// windowSink collects Windows and settles each only when told, to show
// that the window's messages stay unsettled until then.
type windowSink struct {
	mu   sync.Mutex
	got  []stream.Message[flow.Windows[string, agg]]
	hold bool
}

func (s *windowSink) Run(ctx context.Context, in *stream.Inlet[flow.Windows[string, agg]]) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			return nil
		}
		s.mu.Lock()
		for i := range b.Items {
			s.got = append(s.got, b.Items[i])
			if !s.hold {
				in.Settle(&b.Items[i], stream.Completed)
			}
		}
		s.mu.Unlock()
		b.Release()
	}
}

func (s *windowSink) windows() []flow.Windows[string, agg] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ws []flow.Windows[string, agg]
	for _, m := range s.got {
		ws = append(ws, m.Value)
	}
	return ws
}

func pane(ws flow.Windows[string, agg], key string) (flow.Pane[string, agg], bool) {
	for _, p := range ws.Panes {
		if p.Key == key {
			return p, true
		}
	}
	return flow.Pane[string, agg]{}, false
}

type lateLog struct {
	mu   sync.Mutex
	errs []*flow.LateError
}

func (l *lateLog) sink(g *stream.Graph) {
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		var le *flow.LateError
		if errors.As(m.Value.Err, &le) {
			l.mu.Lock()
			l.errs = append(l.errs, le)
			l.mu.Unlock()
		}
		return nil
	}))
}

func TestTumblingAggregatesPerKeyAndSettlesAfterTheWindow(t *testing.T) {
	// Two partitions; arrivals a second after the events; lateness 10 s.
	var recs []rec
	for min := range 3 {
		for sec := 0; sec < 60; sec += 20 {
			for _, k := range []string{"a", "b"} {
				recs = append(recs, rec{part: 0, arrival: at(min, sec+1), r: reading{k, at(min, sec), 1}})
			}
			recs = append(recs, rec{part: 1, arrival: at(min, sec+1), r: reading{"c", at(min, sec), 2}})
		}
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second))), out)
	var late lateLog
	late.sink(g)
	run(t, g)

	ws := out.windows()
	if len(ws) != 6 { // 3 minutes x 2 partitions
		t.Fatalf("%d Windows, want 6: %+v", len(ws), ws)
	}
	for _, w := range ws {
		if w.End.Sub(w.Start) != time.Minute || w.Start.Second() != 0 {
			t.Fatalf("window bounds %v-%v", w.Start, w.End)
		}
		switch w.Partition {
		case 0:
			for _, k := range []string{"a", "b"} {
				p, ok := pane(w, k)
				if !ok || p.Value != (agg{3, 3}) || p.Count != 3 {
					t.Fatalf("partition 0 window %v key %s: %+v", w.Start, k, p)
				}
			}
			if w.Count != 6 {
				t.Fatalf("count %d", w.Count)
			}
		case 1:
			if p, _ := pane(w, "c"); p.Value != (agg{3, 6}) {
				t.Fatalf("partition 1 window %v: %+v", w.Start, p)
			}
		}
		// The last minute closes only at the end of the input: nothing
		// arrived 10 s after its end.
		if w.Early != (w.Start.Equal(at(2, 0))) {
			t.Fatalf("window %v early=%v", w.Start, w.Early)
		}
	}
	// The first window of partition 0 holds offsets 0..5.
	if ws[0].Partition == 0 && ws[0].FirstOffset != 0 {
		t.Fatalf("first offset %d", ws[0].FirstOffset)
	}
	for p, tr := range src.trackers {
		st := checkSettled(t, tr)
		if st.Settled[stream.Completed] != st.Issued {
			t.Fatalf("partition %d: %+v", p, st)
		}
	}
	if len(late.errs) != 0 {
		t.Fatalf("late: %v", late.errs)
	}
}

func TestTumblingMessagesStayUnsettledUntilTheirWindowIs(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(0, 31), reading{"a", at(0, 30), 1}},
		{0, at(1, 11), reading{"a", at(1, 10), 1}}, // closes minute 0 (lateness 10 s)
		{0, at(1, 21), reading{"a", at(1, 20), 1}},
	}
	src := newLog(recs)
	src.pauseAt, src.release = 4, make(chan struct{})
	g := stream.New()
	out := &windowSink{hold: true}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second), flow.IdleClose(0))), out)
	tr := src.tracker(0)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(out.windows()) < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ws := out.windows()
	if len(ws) != 1 || ws[0].Count != 2 || ws[0].Early {
		t.Fatalf("windows %+v", ws)
	}
	if w := tr.Watermark(); w != 0 {
		t.Fatalf("watermark %d before the window is settled", w)
	}
	out.mu.Lock()
	out.got[0].Settle(stream.Completed)
	out.mu.Unlock()
	if w := tr.Watermark(); w != 2 {
		t.Fatalf("watermark %d after settling minute 0, want 2 (minute 1 still open)", w)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTumblingFailsLateAndFarAheadMessagesWithTheirReason(t *testing.T) {
	recs := []rec{
		{0, at(5, 1), reading{"a", at(5, 0), 1}},
		{0, at(5, 2), reading{"a", at(3, 0), 1}},   // arrived 2 min after its event time: late
		{0, at(5, 3), reading{"a", at(7, 0), 1}},   // 2 min ahead of its arrival: MaxAhead is 1 min
		{0, at(6, 20), reading{"a", at(6, 15), 1}}, // closes minute 5
		{0, at(6, 21), reading{"a", at(5, 59), 1}}, // its window was emitted, though within lateness of arrival? no: 22 s > 10 s
		{0, at(6, 22), reading{"a", at(6, 16), 1}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second), flow.MaxAhead(time.Minute))), out)
	var late lateLog
	late.sink(g)
	run(t, g)
	if len(late.errs) != 3 {
		t.Fatalf("late errors %v", late.errs)
	}
	if e := late.errs[0]; e.Offset != 1 || e.Ahead || e.Arrival.Sub(e.Event) != 2*time.Minute+2*time.Second {
		t.Fatalf("first: %+v", e)
	}
	if e := late.errs[1]; e.Offset != 2 || !e.Ahead {
		t.Fatalf("second: %+v", e)
	}
	for _, e := range late.errs {
		if e.Error() == "" || e.Partition != 0 {
			t.Fatalf("%+v", e)
		}
	}
	var total int
	for _, w := range out.windows() {
		total += w.Count
	}
	if total != 3 {
		t.Fatalf("%d messages in windows, want 3", total)
	}
	checkSettled(t, src.tracker(0))
}

func TestTumblingRejectsAMessageForAWindowAlreadyEmitted(t *testing.T) {
	// Arrival timestamps that go back (two producers): the second message
	// is within the lateness of its own arrival but its window is gone.
	recs := []rec{
		{0, at(0, 5), reading{"a", at(0, 4), 1}},
		{0, at(1, 30), reading{"b", at(1, 29), 1}}, // closes minute 0
		{0, at(0, 50), reading{"a", at(0, 45), 1}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second))), out)
	var late lateLog
	late.sink(g)
	run(t, g)
	if len(late.errs) != 1 || late.errs[0].Closed.IsZero() || late.errs[0].Offset != 2 {
		t.Fatalf("late %+v", late.errs)
	}
	checkSettled(t, src.tracker(0))
}

func TestTumblingClosesIdlePartitionsEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan rec)
		tr := stream.NewTracker(0)
		src := stream.SourceFunc[reading](func(ctx context.Context, out *stream.Outlet[reading]) error {
			off := int64(0)
			for r := range ch {
				m := stream.NewMessage(r.r, tr.Track())
				m.Offset, m.Timestamp = off, r.arrival
				off++
				if err := out.Send(ctx, m); err != nil {
					return err
				}
				if err := out.Flush(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		g := stream.New()
		out := &windowSink{}
		stream.To(stream.Via(stream.From(g, src), sumWindow(flow.IdleClose(2*time.Second))), out)
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		ch <- rec{0, at(0, 1), reading{"a", at(0, 0), 1}}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := len(out.windows()); n != 0 {
			t.Fatalf("%d windows before the idle time", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		ws := out.windows()
		if len(ws) != 1 || !ws[0].Early || ws[0].Count != 1 {
			t.Fatalf("after idle: %+v", ws)
		}
		if tr.Watermark() != 1 {
			t.Fatalf("watermark %d", tr.Watermark())
		}
		close(ch)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestTumblingDiscardsTheOpenWindowsOfAnOldAssignment(t *testing.T) {
	// Partition 0 is read under one assignment up to offset 2, then
	// assigned again from offset 1: the replay must not count offset 1
	// twice, and the old assignment's messages stay unsettled.
	old, again := newAssignment(0), newAssignment(1)
	msgs := []stream.Message[reading]{
		old.message(0, reading{"a", at(0, 0), 1}),
		old.message(1, reading{"a", at(0, 10), 1}),
		again.message(1, reading{"a", at(0, 10), 1}),
		again.message(2, reading{"a", at(0, 20), 1}),
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
	if len(ws) != 1 || ws[0].Count != 2 || ws[0].FirstOffset != 1 || ws[0].Panes[0].Value != (agg{2, 2}) {
		t.Fatalf("windows %+v", ws)
	}
	if st := old.Stats(); st.Total() != 0 {
		t.Fatalf("old assignment settled: %+v", st)
	}
	if st := again.Stats(); st.Settled[stream.Completed] != 2 || st.Duplicates != 0 || again.Watermark() != 3 {
		t.Fatalf("new assignment: %+v, watermark %d", st, again.Watermark())
	}
}

func TestTumblingConstructionErrorsNameTheArgument(t *testing.T) {
	key := func(m *stream.Message[reading]) string { return m.Value.key }
	ev := func(r *reading) time.Time { return r.event }
	add := func(a *agg, r *reading) {}
	cases := map[string]stream.Flow[reading, flow.Windows[string, agg]]{
		"size":      flow.Tumbling(0, key, ev, add),
		"lateness":  flow.Tumbling(time.Minute, key, ev, add, flow.Lateness(-time.Second)),
		"maxAhead":  flow.Tumbling(time.Minute, key, ev, add, flow.MaxAhead(-time.Second)),
		"idleClose": flow.Tumbling(time.Minute, key, ev, add, flow.IdleClose(-time.Second)),
		"key":       flow.Tumbling[reading, string, agg](time.Minute, nil, ev, add),
		"add":       flow.Tumbling[reading, string, agg](time.Minute, key, ev, nil),
	}
	for arg, f := range cases {
		g := stream.New()
		stream.To(stream.Via(stream.From(g, stream.Source[reading](newLog(nil))), f), sink.Discard[flow.Windows[string, agg]]())
		err := g.Run(context.Background())
		var ce *stream.ConfigError
		if !errors.As(err, &ce) || ce.Argument != arg || ce.Stage != "window" || !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("%s: %v", arg, err)
		}
	}
}

func TestTumblingPanicInAddFailsOnlyThatMessage(t *testing.T) {
	recs := []rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(0, 2), reading{"b", at(0, 1), -1}}, // add panics
		{0, at(0, 3), reading{"a", at(0, 2), 1}},
	}
	src := newLog(recs)
	g := stream.New()
	out := &windowSink{}
	w := flow.Tumbling(time.Minute, func(m *stream.Message[reading]) string { return m.Value.key },
		func(r *reading) time.Time { return r.event },
		func(a *agg, r *reading) {
			if r.v < 0 {
				panic("negative")
			}
			a.n++
		})
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), w), out)
	failed := 0
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { failed++; return nil }))
	run(t, g)
	ws := out.windows()
	if len(ws) != 1 || len(ws[0].Panes) != 1 || ws[0].Count != 2 || failed != 1 {
		t.Fatalf("windows %+v, failed %d", ws, failed)
	}
	checkSettled(t, src.tracker(0))
}

func TestTumblingHandsLateMessagesOnWithoutWaitingForMore(t *testing.T) {
	// The source stays open after a late message: the dead letter must
	// get it anyway, or its offset, and every later one, stays
	// uncommitted.
	src := newLog([]rec{
		{0, at(0, 1), reading{"a", at(0, 0), 1}},
		{0, at(5, 0), reading{"a", at(1, 0), 1}}, // 4 min late
	})
	src.pauseAt, src.release = 2, make(chan struct{})
	g := stream.New()
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.Lateness(10*time.Second))), &windowSink{})
	var late lateLog
	late.sink(g)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	n := 0
	for n == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		late.mu.Lock()
		n = len(late.errs)
		late.mu.Unlock()
	}
	close(src.release)
	if n == 0 {
		t.Fatal("the late message reached no dead letter while the input stayed open")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	late.mu.Lock()
	defer late.mu.Unlock()
	if len(late.errs) != 1 {
		t.Fatalf("late %v", late.errs)
	}
}

func TestTumblingLeavesOpenWindowsUnsettledWhenThePipelineStops(t *testing.T) {
	// A cancelled pipeline is not the end of the input: a window written
	// now would be committed without the rest of its minute.
	src := newLog([]rec{{0, at(0, 1), reading{"a", at(0, 0), 1}}})
	src.pauseAt, src.release = 1, make(chan struct{})
	g := stream.New()
	out := &windowSink{}
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow()), out)
	tr := src.tracker(0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	for tr.Stats().Issued == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	<-done
	if ws := out.windows(); len(ws) != 0 {
		t.Fatalf("windows emitted on stop: %+v", ws)
	}
	if st := tr.Stats(); st.Total() != 0 {
		t.Fatalf("settled on stop: %+v", st)
	}
}

func TestTumblingPanicInIdleWhenKeepsTheWindowOpen(t *testing.T) {
	// IdleWhen is user code run for a partition, not for a message: a
	// panic in it must not end the pipeline (a restart would meet it
	// again); the partition is taken as not idle.
	src := newLog([]rec{{0, at(0, 1), reading{"a", at(0, 0), 1}}})
	src.pauseAt, src.release = 1, make(chan struct{})
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := &windowSink{}
	calls := make(chan struct{}, 100)
	boom := func(string, int32) bool { calls <- struct{}{}; panic("broken predicate") }
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)), sumWindow(flow.IdleClose(time.Millisecond), flow.IdleWhen(boom))), out)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	for range 3 {
		select {
		case <-calls:
		case err := <-done:
			close(src.release)
			t.Fatalf("the pipeline ended: %v", err)
		}
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatalf("the pipeline ended: %v", err)
	}
	if ws := out.windows(); len(ws) != 1 || ws[0].Count != 1 {
		t.Fatalf("windows %+v", ws)
	}
}

func TestTumblingIdleWhenHeldIsToldWhatTheWindowHolds(t *testing.T) {
	// IdleWhenHeld is told how many messages of the partition the open
	// windows hold; the windows close only once it returns true, and
	// IdleWhen must agree too.
	src := newLog([]rec{{0, at(0, 1), reading{"a", at(0, 0), 1}}, {0, at(0, 2), reading{"b", at(0, 1), 1}}})
	src.pauseAt, src.release = 2, make(chan struct{})
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	out := &windowSink{}
	helds := make(chan int, 100)
	var allow atomic.Bool
	held := func(_ string, _ int32, n int) bool {
		select {
		case helds <- n:
		default:
		}
		return allow.Load()
	}
	agrees := func(string, int32) bool { return true }
	stream.To(stream.Via(stream.From(g, stream.Source[reading](src)),
		sumWindow(flow.IdleClose(time.Millisecond), flow.IdleWhenHeld(held), flow.IdleWhen(agrees))), out)
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	for range 3 {
		if n := <-helds; n != 2 {
			t.Fatalf("IdleWhenHeld told %d messages held, want 2", n)
		}
	}
	if ws := out.windows(); len(ws) != 0 {
		t.Fatalf("windows emitted while IdleWhenHeld said no: %+v", ws)
	}
	allow.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for len(out.windows()) == 0 {
		if time.Now().After(deadline) {
			close(src.release)
			t.Fatal("no idle close within 5 s of IdleWhenHeld saying yes")
		}
		time.Sleep(time.Millisecond)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ws := out.windows(); len(ws) != 1 || ws[0].Count != 2 || !ws[0].Early {
		t.Fatalf("windows %+v, want one early with both messages", ws)
	}
}

package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
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

// checkSettled asserts that every message the tracker issued was settled
// exactly once and the watermark passed all of them.
func checkSettled(t *testing.T, tr *stream.Tracker, want map[stream.Outcome]int64) {
	t.Helper()
	st := tr.Stats()
	if st.Duplicates != 0 {
		t.Errorf("%d duplicate settles", st.Duplicates)
	}
	if st.Total() != st.Issued {
		t.Errorf("settled %d of %d messages", st.Total(), st.Issued)
	}
	if wm := tr.Watermark(); wm != st.Issued {
		t.Errorf("watermark %d, want %d", wm, st.Issued)
	}
	for o, n := range want {
		if st.Settled[o] != n {
			t.Errorf("%v: settled %d, want %d", o, st.Settled[o], n)
		}
	}
}

func TestPipelineMapFilterKeepsOrderAndSettlesAll(t *testing.T) {
	const n = 100_000
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.From(g, source.Slice(ints(n), source.Track(tr)))
	strs := stream.Via(s, flow.Map(func(x int) (string, error) { return fmt.Sprint(x * 2), nil }))
	kept := stream.Via(strs, flow.Filter(func(v string) bool { return !strings.HasSuffix(v, "0") }))
	out := sink.Collect[string]()
	stream.To(kept, out)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		if v := fmt.Sprint(i * 2); !strings.HasSuffix(v, "0") {
			want = append(want, v)
		}
	}
	got := out.Values()
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d = %q, want %q (order lost)", i, got[i], want[i])
		}
	}
	checkSettled(t, tr, map[stream.Outcome]int64{
		stream.Completed: int64(len(want)),
		stream.Filtered:  int64(n - len(want)),
	})
}

func TestEnvelopeTravelsThroughTypeChange(t *testing.T) {
	g := stream.New()
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		m := stream.NewMessage(7, stream.Handle{})
		m.Key = []byte("k")
		m.Headers = []stream.Header{{Key: "h", Value: []byte("v")}}
		m.Topic, m.Partition, m.Offset, m.Attempt = "t", 3, 42, 1
		return out.Send(ctx, m)
	})
	s := stream.Via(stream.From(g, src), flow.Map(func(x int) (string, error) { return fmt.Sprint(x), nil }))
	out := sink.Collect[string]()
	stream.To(s, out)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := out.Messages()[0]
	if m.Value != "7" || string(m.Key) != "k" || string(m.Header("h")) != "v" || m.Topic != "t" ||
		m.Partition != 3 || m.Offset != 42 || m.Attempt != 1 {
		t.Fatalf("envelope lost: %+v", m)
	}
}

func TestPerMessageErrorsAreDeadLetteredAndPipelineContinues(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.From(g, source.Slice(ints(1000), source.Track(tr)))
	s = stream.Via(s, flow.Map(func(x int) (int, error) {
		switch {
		case x%10 == 0:
			return 0, fmt.Errorf("bad input %d", x)
		case x%10 == 5:
			panic("boom")
		}
		return x, nil
	}), stream.Name("parse"))
	out := sink.Collect[int]()
	stream.To(s, out)
	var dead []stream.Message[stream.Failure]
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		dead = append(dead, m)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(out.Values()) != 800 || len(dead) != 200 {
		t.Fatalf("completed %d, dead-lettered %d; want 800 and 200", len(out.Values()), len(dead))
	}
	panics := 0
	for _, m := range dead {
		if m.Value.Stage != "parse" {
			t.Fatalf("failure names stage %q, want parse", m.Value.Stage)
		}
		var p *stream.PanicError
		if errors.As(m.Value.Err, &p) {
			panics++
			if m.Value.Value.(int)%10 != 5 {
				t.Fatalf("panic attributed to %v", m.Value.Value)
			}
		} else if !strings.Contains(m.Value.Err.Error(), "bad input") || m.Offset != int64(m.Value.Value.(int)) {
			t.Fatalf("unexpected failure %v at offset %d", m.Value, m.Offset)
		}
	}
	if panics != 100 {
		t.Fatalf("%d panics dead-lettered, want 100", panics)
	}
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 800, stream.DeadLettered: 200})
}

func TestDefaultDeadLetterLogsAndSettles(t *testing.T) {
	tr := stream.NewTracker(0)
	var logged strings.Builder
	g := stream.New(stream.WithLogger(newTextLogger(&logged)))
	s := stream.From(g, source.Slice(ints(10), source.Track(tr)))
	s = stream.Via(s, flow.Map(func(x int) (int, error) {
		if x == 3 {
			return 0, errors.New("three is invalid")
		}
		return x, nil
	}))
	stream.To(s, sink.Discard[int]())
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "three is invalid") {
		t.Fatalf("log lacks the reason: %s", logged.String())
	}
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 9, stream.DeadLettered: 1})
}

func TestFatalErrorEndsRunWithStageName(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New()
	s := stream.From(g, source.Generator(func(i int64) int64 { return i }, source.Track(tr)))
	s = stream.Via(s, flow.Map(func(x int64) (int64, error) {
		if x == 5000 {
			return 0, stream.Fatal(errors.New("database gone"))
		}
		return x, nil
	}), stream.Name("enrich"))
	stream.To(s, sink.Discard[int64]())
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "enrich" || !strings.Contains(err.Error(), "database gone") {
		t.Fatalf("Run = %v, want a StageError naming enrich", err)
	}
	// The failing message and those after it are not settled: they are
	// replayed after a restart. Everything settled is below it.
	if wm := tr.Watermark(); wm > 5000 {
		t.Fatalf("watermark %d passed the failed message 5000", wm)
	}
	if d := tr.Stats().Duplicates; d != 0 {
		t.Fatalf("%d duplicate settles", d)
	}
}

func TestSinkFailureEndsRun(t *testing.T) {
	g := stream.New()
	s := stream.From(g, source.Slice(ints(100)))
	stream.To(s, sink.Func(func(_ context.Context, x int) error {
		if x == 50 {
			return stream.Fatal(errors.New("disk full"))
		}
		return nil
	}), stream.Name("writer"))
	err := g.Run(context.Background())
	var se *stream.StageError
	if !errors.As(err, &se) || se.Stage != "writer" {
		t.Fatalf("Run = %v, want StageError for writer", err)
	}
}

func TestStagePanicOutsideUserFunctionEndsRun(t *testing.T) {
	g := stream.New()
	s := stream.From(g, source.Slice(ints(10)))
	s = stream.Via(s, stream.FlowFunc[int, int](func(context.Context, *stream.Inlet[int], *stream.Outlet[int]) error {
		panic("broken stage")
	}), stream.Name("broken"))
	stream.To(s, sink.Discard[int]())
	err := g.Run(context.Background())
	var pe *stream.PanicError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Run = %v, want a PanicError from stage broken", err)
	}
}

func TestEmptySource(t *testing.T) {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice[int](nil)), flow.Map(func(x int) (int, error) { return x, nil }))
	out := sink.Collect[int]()
	stream.To(s, out)
	if err := g.Run(context.Background()); err != nil || len(out.Values()) != 0 {
		t.Fatalf("Run = %v with %d values", err, len(out.Values()))
	}
}

func TestCancelDrainsInFlightMessages(t *testing.T) {
	tr := stream.NewTracker(0)
	ch := make(chan int)
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New()
	s := stream.From(g, source.Channel(ch, source.Track(tr)))
	var seen atomic.Int64
	stream.To(s, sink.Func(func(context.Context, int) error {
		seen.Add(1)
		return nil
	}))
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	for i := range 1000 {
		ch <- i
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil (drained)", err)
	}
	// Every message the source took was processed and settled.
	if seen.Load() != 1000 {
		t.Fatalf("sink saw %d of 1000", seen.Load())
	}
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 1000})
}

func TestCancelWithStuckStageReturnsDrainTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New(stream.WithDrainTimeout(50 * time.Millisecond))
	s := stream.From(g, source.Slice(ints(10)))
	started := make(chan struct{})
	stream.To(s, sink.Func(func(ctx context.Context, x int) error {
		if x == 0 {
			close(started)
		}
		<-ctx.Done() // a call that only ends when cancelled
		return ctx.Err()
	}))
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, stream.ErrDrainTimeout) {
		t.Fatalf("Run = %v, want ErrDrainTimeout", err)
	}
}

func TestConfigurationErrorsBeforeStart(t *testing.T) {
	cases := map[string]func(g *stream.Graph){
		"map fn": func(g *stream.Graph) {
			s := stream.Via(stream.From(g, source.Slice(ints(1))), flow.Map[int, int](nil))
			stream.To(s, sink.Discard[int]())
		},
		"filter keep": func(g *stream.Graph) {
			s := stream.Via(stream.From(g, source.Slice(ints(1))), flow.Filter[int](nil))
			stream.To(s, sink.Discard[int]())
		},
		"Buffer": func(g *stream.Graph) {
			stream.To(stream.From(g, source.Slice(ints(1))), sink.Discard[int](), stream.Buffer(0))
		},
		"not connected": func(g *stream.Graph) {
			stream.Via(stream.From(g, source.Slice(ints(1))), flow.Filter(func(int) bool { return true }))
		},
		"already connected": func(g *stream.Graph) {
			s := stream.From(g, source.Slice(ints(1)))
			stream.To(s, sink.Discard[int]())
			stream.To(s, sink.Discard[int]())
		},
		"Rate": func(g *stream.Graph) {
			stream.To(stream.From(g, source.Generator(func(i int64) int64 { return i }, source.Rate(-1, 1))), sink.Discard[int64]())
		},
		"nil sink": func(g *stream.Graph) { stream.To[int](stream.From(g, source.Slice(ints(1))), nil) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			g := stream.New()
			build(g)
			err := g.Run(context.Background())
			if !errors.Is(err, stream.ErrInvalid) {
				t.Fatalf("Run = %v, want ErrInvalid", err)
			}
			t.Log(err)
		})
	}
	if err := stream.New(stream.WithCapacity(-1)).Run(context.Background()); !errors.Is(err, stream.ErrInvalid) ||
		!strings.Contains(err.Error(), "WithCapacity") {
		t.Fatalf("negative capacity: %v", err)
	}
}

func TestRunTwiceIsAnError(t *testing.T) {
	g := stream.New()
	stream.To(stream.From(g, source.Slice(ints(1))), sink.Discard[int]())
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("second Run = %v", err)
	}
}

// badString is a value whose String method panics.
type badString struct{ n int }

func (b badString) String() string { panic(fmt.Sprintf("String of %d", b.n)) }

// panicError is an error whose Error method panics.
type panicError struct{}

func (panicError) Error() string { panic("Error") }

// The default dead letter records whatever failed: a value that cannot be
// printed, or a failure without a reason, must not stop the pipeline.
func TestDefaultDeadLetterSurvivesUnprintableFailures(t *testing.T) {
	tr := stream.NewTracker(0)
	g := stream.New(stream.WithLogger(newTextLogger(io.Discard)))
	s := stream.From(g, source.Slice(ints(100), source.Track(tr)))
	bad := stream.Via(s, flow.Map(func(v int) (badString, error) {
		if v%10 == 0 {
			return badString{}, errors.New("rejected")
		}
		return badString{v}, nil
	}))
	failAgain := stream.FlowFunc[badString, badString](func(ctx context.Context, in *stream.Inlet[badString], out *stream.Outlet[badString]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range b.Items {
				switch {
				case m.Value.n%10 == 1:
					err = in.Fail(ctx, m, nil) // a failure without a reason
				case m.Value.n%10 == 2:
					err = in.Fail(ctx, m, errors.New("its value cannot be printed"))
				case m.Value.n%10 == 3:
					err = in.Fail(ctx, m, panicError{}) // nor its reason
				default:
					err = out.Send(ctx, m)
				}
				if err != nil {
					return err
				}
			}
			b.Release()
		}
	})
	stream.To(stream.Via(bad, failAgain), sink.Discard[badString]())
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkSettled(t, tr, map[stream.Outcome]int64{stream.Completed: 60, stream.DeadLettered: 40})
}

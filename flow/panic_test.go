package flow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// failureLog is a dead letter that keeps the failures.
type failureLog struct {
	mu sync.Mutex
	fs []stream.Failure
}

func (l *failureLog) sink() sink.DeadLetter {
	return sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		l.mu.Lock()
		l.fs = append(l.fs, m.Value)
		l.mu.Unlock()
		return nil
	})
}

// panics returns the values of the failures whose reason is a panic, and
// how many failed otherwise.
func (l *failureLog) panics() (values []any, others int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fs {
		var pe *stream.PanicError
		if errors.As(f.Err, &pe) {
			values = append(values, f.Value)
		} else {
			others++
		}
	}
	return values, others
}

// runInts runs 0..n-1 through f and returns what came out, with the
// failures; Run must return nil and every message must be settled once.
func runInts(t *testing.T, n int, f stream.Flow[int, int]) ([]int, *failureLog) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New()
	out := sink.Collect[int]()
	stream.To(stream.Via(stream.From(g, source.Slice(ints(n), source.Track(tr))), f), out)
	var l failureLog
	stream.To(g.Failures(), l.sink())
	run(t, g)
	checkSettled(t, tr)
	return out.Values(), &l
}

// onlyPanicked checks that the one failure is a panic, of value want when
// want is not nil, and that every other message came out.
func onlyPanicked(t *testing.T, n int, out []int, l *failureLog, want any) {
	t.Helper()
	vs, others := l.panics()
	if len(vs) != 1 || others != 0 || want != nil && vs[0] != want || len(out) != n-1 {
		t.Fatalf("%d out of %d; panicked %v, other failures %d; want one panic (of %v) and the rest out", len(out), n, vs, others, want)
	}
}

func TestDelayDuePanicFailsOnlyThatMessage(t *testing.T) {
	due := func(e *stream.Envelope) time.Time {
		if e.Offset == 7 {
			panic("due bug")
		}
		return time.Time{}
	}
	out, l := runInts(t, 20, flow.Delay[int](due))
	onlyPanicked(t, 20, out, l, 7)
}

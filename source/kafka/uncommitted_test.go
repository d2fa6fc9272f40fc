package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// runInto runs src into snk until the test ends, and returns a function
// that stops the pipeline and waits for it.
func runInto(t *testing.T, src *kafka.Source, snk stream.Sink[[]byte]) (stop func()) {
	t.Helper()
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), snk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		src.Close(context.Background())
	}
	t.Cleanup(stop)
	return stop
}

// A member that has never committed still has its records of the partition
// to commit: its lag is the high watermark minus where the group started,
// not 0, until a commit brings it down.
func TestLagCountsRecordsNeverCommitted(t *testing.T) {
	const n = 300
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "lag-never-committed")
	var seen atomic.Int64
	stop := runInto(t, src, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "every record read", func() bool {
		st := src.Stats()
		return seen.Load() == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	p := src.Stats().Partitions[0]
	if p.Committed != -1 || p.Lag != n {
		t.Fatalf("before any commit: committed %d, lag %d; want -1 and %d (every record read, none committed)", p.Committed, p.Lag, n)
	}
	if err := src.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := src.Stats().Partitions[0]; p.Committed != n || p.Lag != 0 {
		t.Fatalf("after the commit: committed %d, lag %d; want %d and 0", p.Committed, p.Lag, n)
	}

	// The next member of the group starts from that commit: its lag is the
	// records produced since, not the whole log.
	stop() // Close commits n again: nothing new
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(n + i)) })
	next := newSource(t, brokers, "lag-never-committed")
	seen.Store(0)
	runInto(t, next, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "the new records read", func() bool {
		st := next.Stats()
		return seen.Load() == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	if p := next.Stats().Partitions[0]; p.Committed != -1 || p.Lag != n {
		t.Fatalf("next member, before its first commit: committed %d, lag %d; want -1 and %d (the records after the group's commit)", p.Committed, p.Lag, n)
	}
}

// warnings is a slog handler that keeps the messages of warnings.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// uncommitted returns the warnings that settled records are not committed.
func (w *warnings) uncommitted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.msgs {
		if strings.Contains(m, "have not been committed") {
			out = append(out, m)
		}
	}
	return out
}

// A pipeline that ends in a plain sink commits nothing while it runs; the
// source says so, once, and how to fix it. One that ends in the checkpoint
// sink commits and is not warned. The checkpoint pipeline settles and
// commits its records before the other one starts, so it has held settled
// records longer than the interval by the time the other one warns.
func TestWarnsOnceWhenSettledRecordsAreNeverCommitted(t *testing.T) {
	const n = 100
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	withWarnings := func(w *warnings) func(*kafka.Config) {
		return func(c *kafka.Config) {
			c.Logger = slog.New(w)
			c.UncommittedWarning = 50 * time.Millisecond
		}
	}

	var cw warnings
	var committed atomic.Int64
	cp := newSource(t, brokers, "warn-checkpoint", withWarnings(&cw), func(c *kafka.Config) {
		c.OnCommit = func(_ string, _ int32, off int64) { committed.Store(off) }
	})
	stopCP := runInto(t, cp, checkpoint.New[[]byte](cp, checkpoint.Interval(10*time.Millisecond)))
	eventually(t, "the checkpoint pipeline to commit every record", func() bool { return committed.Load() == n })

	var fw warnings
	var seen atomic.Int64
	fn := newSource(t, brokers, "warn-func", withWarnings(&fw))
	runInto(t, fn, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "the warning of the pipeline that never commits", func() bool { return len(fw.uncommitted()) > 0 })
	want := "settled records of in have not been committed for 50ms: end the pipeline with checkpoint.New(src) or call src.Commit; a crash now replays them"
	if got := fw.uncommitted(); got[0] != want {
		t.Errorf("warning %q, want %q", got[0], want)
	}

	stopCP()
	if got := cw.uncommitted(); len(got) > 0 {
		t.Errorf("the checkpoint pipeline, which commits, was warned: %q", got)
	}
	if got := fw.uncommitted(); len(got) != 1 {
		t.Errorf("%d warnings, want one: %q", len(got), got)
	}
}

// gauges is a stream.Meter that reads a component's gauges.
type gauges struct{ collect []func(stream.MetricWriter) }

func (g *gauges) Collect(f func(stream.MetricWriter)) { g.collect = append(g.collect, f) }
func (g *gauges) Histogram(string, string, []float64, ...stream.Label) func(float64) {
	return func(float64) {}
}
func (g *gauges) Include(stream.Instrumented, string) {}

// read returns the value of each gauge named name, by its labels.
func (g *gauges) read(name string) map[string]float64 {
	w := gaugeWriter{name: name, got: map[string]float64{}}
	for _, f := range g.collect {
		f(w)
	}
	return w.got
}

type gaugeWriter struct {
	name string
	got  map[string]float64
}

func (w gaugeWriter) Counter(string, string, float64, ...stream.Label) {}
func (w gaugeWriter) Gauge(name, _ string, v float64, labels ...stream.Label) {
	if name == w.name {
		w.got[fmt.Sprint(labels)] = v
	}
}

// The lag gauge reports what Stats reports before the member's first
// commit: a pipeline that never commits is the one the lag alert exists
// for, and a missing series never fires.
func TestLagGaugeBeforeAnyCommit(t *testing.T) {
	const n = 200
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "lag-gauge-never-committed")
	m := &gauges{}
	src.Instrument("in", m)
	var seen atomic.Int64
	runInto(t, src, sink.Func(func(context.Context, []byte) error { seen.Add(1); return nil }))
	eventually(t, "every record read", func() bool {
		st := src.Stats()
		return seen.Load() == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	if p := src.Stats().Partitions[0]; p.Lag != n {
		t.Fatalf("Stats lag %d, want %d", p.Lag, n)
	}
	lag := m.read("sluice_kafka_lag")
	if len(lag) != 1 {
		t.Fatalf("sluice_kafka_lag before any commit: %v; want one series of %d (Stats says %d)", lag, n, n)
	}
	for _, v := range lag {
		if v != n {
			t.Fatalf("sluice_kafka_lag before any commit: %v, want %d", v, n)
		}
	}
}

// A pipeline that ends in the checkpoint sink commits, however long its
// Interval: it is not warned before its first commit comes due. The plain
// pipeline started after it has settled its records serves as the clock:
// once that one is warned, the checkpoint pipeline has held settled
// records for longer.
func TestNoWarningBeforeACheckpointsFirstCommit(t *testing.T) {
	const n = 100
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	warnAfter := func(w *warnings) func(*kafka.Config) {
		return func(c *kafka.Config) {
			c.Logger = slog.New(w)
			c.UncommittedWarning = 50 * time.Millisecond
		}
	}
	var cw warnings
	cp := newSource(t, brokers, "warn-slow-checkpoint", warnAfter(&cw))
	stopCP := runInto(t, cp, checkpoint.New[[]byte](cp, checkpoint.Interval(time.Hour)))
	eventually(t, "the checkpoint pipeline to settle every record", func() bool {
		st := cp.Stats()
		return st.Records == n && len(st.Partitions) == 1 && st.Partitions[0].Unsettled == 0
	})
	var fw warnings
	fn := newSource(t, brokers, "warn-slow-func", warnAfter(&fw))
	runInto(t, fn, sink.Func(func(context.Context, []byte) error { return nil }))
	eventually(t, "the warning of the pipeline that never commits", func() bool { return len(fw.uncommitted()) > 0 })
	got := cw.uncommitted()
	stopCP()
	if len(got) > 0 {
		t.Fatalf("the checkpoint pipeline, whose first commit is due in an hour, was warned: %q", got)
	}
}

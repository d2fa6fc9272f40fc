package benchmarks

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	streams "github.com/reugn/go-streams"
	"github.com/reugn/go-streams/extension"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// pipelineN is the number of ints each BenchmarkPipeline op moves.
const pipelineN = 1_000_000

// wantKept is how many of 0..N-1 survive map(x+1) then filter(x%3 != 0).
func wantKept(n int) int {
	k := 0
	for i := range n {
		if (i+1)%3 != 0 {
			k++
		}
	}
	return k
}

// BenchmarkPipeline runs one topology, source -> map(x+1) -> filter(x%3 != 0)
// -> counting sink over 1,000,000 ints, in sluice, in go-streams and in
// hand-written goroutines and channels, and reports elems/s for each.
func BenchmarkPipeline(b *testing.B) {
	ints := make([]int, pipelineN)
	for i := range ints {
		ints[i] = i
	}
	want := wantKept(pipelineN)
	report := func(b *testing.B, got int) {
		b.Helper()
		if got != want {
			b.Fatalf("sink counted %d elements, want %d", got, want)
		}
		b.ReportMetric(float64(pipelineN)*float64(b.N)/b.Elapsed().Seconds(), "elems/s")
		b.ReportMetric(0, "ns/op")
	}

	b.Run("sluice", func(b *testing.B) {
		b.ReportAllocs()
		var got int
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		for b.Loop() {
			got = runSluice(b, ints)
		}
		runtime.ReadMemStats(&ms1)
		report(b, got)
		// Allocations per element, pipeline setup included: the per-element
		// path (source, Map, Filter, sink) allocates nothing.
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(pipelineN)/float64(b.N), "allocs/elem")
	})
	b.Run("sluice_instrumented", func(b *testing.B) {
		// The same pipeline with Prometheus metrics and the engine's
		// observer on, interleaved with uninstrumented runs so that both
		// see the same machine.
		var got int
		var plain, instr time.Duration
		for b.Loop() {
			t0 := time.Now()
			runSluice(b, ints)
			plain += time.Since(t0)
			reg := prometheus.NewRegistry()
			m, err := observe.New(reg, "bench")
			if err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			got = runSluiceWith(b, ints, m)
			instr += time.Since(t0)
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		if got != want {
			b.Fatalf("sink counted %d elements, want %d", got, want)
		}
		b.ReportMetric(float64(pipelineN)*float64(b.N)/instr.Seconds(), "elems/s")
		b.ReportMetric(plain.Seconds()/instr.Seconds(), "vs_uninstrumented")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("gostreams", func(b *testing.B) {
		b.ReportAllocs()
		var got int
		for b.Loop() {
			got = runGoStreams(ints)
		}
		report(b, got)
	})
	b.Run("chan_unbuffered", func(b *testing.B) {
		b.ReportAllocs()
		var got int
		for b.Loop() {
			got = runChannels(ints, 0)
		}
		report(b, got)
	})
	b.Run("chan_buffered64", func(b *testing.B) {
		b.ReportAllocs()
		var got int
		for b.Loop() {
			got = runChannels(ints, 64)
		}
		report(b, got)
	})
}

// TestTopologiesAgree runs each BenchmarkPipeline topology once on a small
// input, so that make test proves they compute the same thing.
func TestTopologiesAgree(t *testing.T) {
	ints := make([]int, 10_000)
	for i := range ints {
		ints[i] = i
	}
	want := wantKept(len(ints))
	if got := runSluice(t, ints); got != want {
		t.Errorf("sluice counted %d, want %d", got, want)
	}
	if got := runGoStreams(ints); got != want {
		t.Errorf("go-streams counted %d, want %d", got, want)
	}
	for _, c := range []int{0, 64} {
		if got := runChannels(ints, c); got != want {
			t.Errorf("channels(%d) counted %d, want %d", c, got, want)
		}
	}
}

func runSluice(b testing.TB, ints []int) int { return runSluiceWith(b, ints, nil) }

func runSluiceWith(b testing.TB, ints []int, m *observe.Metrics) int {
	count := 0
	g := stream.New()
	s := stream.From(g, source.Slice(ints))
	s = stream.Via(s, flow.Map(func(x int) (int, error) { return x + 1, nil }))
	s = stream.Via(s, flow.Filter(func(x int) bool { return x%3 != 0 }))
	stream.To(s, sink.Func(func(_ context.Context, _ int) error { count++; return nil }))
	if m != nil {
		if err := m.Register(g); err != nil {
			b.Fatal(err)
		}
	}
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return count
}

func runGoStreams(ints []int) int {
	in := make(chan any)
	out := make(chan any)
	done := make(chan int)
	go func() {
		n := 0
		for range out {
			n++
		}
		done <- n
	}()
	go func() {
		for _, x := range ints {
			in <- x
		}
		close(in)
	}()
	var src streams.Source = extension.NewChanSource(in)
	src.Via(gsflow.NewMap(func(x int) int { return x + 1 }, 1)).
		Via(gsflow.NewFilter(func(x int) bool { return x%3 != 0 }, 1)).
		To(extension.NewChanSink(out))
	return <-done
}

func runChannels(ints []int, capacity int) int {
	a := make(chan int, capacity)
	m := make(chan int, capacity)
	f := make(chan int, capacity)
	go func() {
		for _, x := range ints {
			a <- x
		}
		close(a)
	}()
	go func() {
		for x := range a {
			m <- x + 1
		}
		close(m)
	}()
	go func() {
		for x := range m {
			if x%3 != 0 {
				f <- x
			}
		}
		close(f)
	}()
	n := 0
	for range f {
		n++
	}
	return n
}

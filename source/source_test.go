package source_test

import (
	"testing"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

func TestSliceContract(t *testing.T) {
	var tr *stream.Tracker
	streamtest.TestSource(t, streamtest.SourceCase[int]{
		New: func(_ *testing.T, n int) stream.Source[int] {
			tr = stream.NewTracker(0)
			return source.Slice(make([]int, n), source.Track(tr))
		},
		Bounded: true,
		Tracker: func() *stream.Tracker { return tr },
	})
}

func TestGeneratorContract(t *testing.T) {
	var tr *stream.Tracker
	streamtest.TestSource(t, streamtest.SourceCase[int64]{
		New: func(_ *testing.T, n int) stream.Source[int64] {
			tr = stream.NewTracker(0)
			return source.Generator(func(i int64) int64 { return i }, source.Track(tr))
		},
		Tracker: func() *stream.Tracker { return tr },
	})
}

func TestBoundedRateLimitedGeneratorContract(t *testing.T) {
	streamtest.TestSource(t, streamtest.SourceCase[int64]{
		New: func(_ *testing.T, n int) stream.Source[int64] {
			return source.Generator(func(i int64) int64 { return i }, source.Count(int64(n)), source.Rate(1e6, 1000))
		},
		Bounded: true,
	})
}

func TestChannelContract(t *testing.T) {
	var tr *stream.Tracker
	streamtest.TestSource(t, streamtest.SourceCase[int]{
		New: func(t *testing.T, n int) stream.Source[int] {
			tr = stream.NewTracker(0)
			ch := make(chan int, n)
			for i := range n {
				ch <- i
			}
			close(ch)
			return source.Channel(ch, source.Track(tr))
		},
		Bounded: true,
		Tracker: func() *stream.Tracker { return tr },
	})
}

func TestGoStreamsContract(t *testing.T) {
	streamtest.TestSource(t, streamtest.SourceCase[int]{
		New: func(t *testing.T, n int) stream.Source[int] {
			ch := make(chan any, n)
			for i := range n {
				ch <- i
			}
			close(ch)
			return source.GoStreams[int](extension.NewChanSource(ch))
		},
		Bounded: true,
	})
}

package source_test

import (
	"reflect"
	"testing"

	"github.com/reugn/go-streams/extension"

	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

// The basic sources emit the values they are given in order, as one
// partition; they keep nothing across a restart.
var ordered = streamtest.Features{OrderedPerPartition: true}

// index is the Index of the cases whose values are their indexes.
func index[T int | int64](v T) int { return int(v) }

func TestSliceContract(t *testing.T) {
	var tr *stream.Tracker
	streamtest.TestSource(t, streamtest.SourceCase[int]{
		New: func(_ *testing.T, n int) stream.Source[int] {
			tr = stream.NewTracker(0)
			vs := make([]int, n)
			for i := range vs {
				vs[i] = i
			}
			return source.Slice(vs, source.Track(tr))
		},
		Bounded:  true,
		Tracker:  func() *stream.Tracker { return tr },
		Features: ordered,
		Index:    index[int],
	})
}

func TestGeneratorContract(t *testing.T) {
	var tr *stream.Tracker
	streamtest.TestSource(t, streamtest.SourceCase[int64]{
		New: func(_ *testing.T, n int) stream.Source[int64] {
			tr = stream.NewTracker(0)
			return source.Generator(func(i int64) int64 { return i }, source.Track(tr))
		},
		Tracker:  func() *stream.Tracker { return tr },
		Features: ordered,
		Index:    index[int64],
	})
}

func TestBoundedRateLimitedGeneratorContract(t *testing.T) {
	streamtest.TestSource(t, streamtest.SourceCase[int64]{
		New: func(_ *testing.T, n int) stream.Source[int64] {
			return source.Generator(func(i int64) int64 { return i }, source.Count(int64(n)), source.Rate(1e6, 1000))
		},
		Bounded:  true,
		Features: ordered,
		Index:    index[int64],
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
		Bounded:  true,
		Tracker:  func() *stream.Tracker { return tr },
		Features: ordered,
		Index:    index[int],
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
		Bounded:  true,
		Features: ordered,
		Index:    index[int],
	})
}

// Rate and Count are Generator's options: a Slice or a Channel would ignore
// them, so their type must not be an Option (passing one there does not
// compile), while Track must serve every source.
func TestOptionsAreTypedBySource(t *testing.T) {
	option := reflect.TypeFor[source.Option]()
	generatorOption := reflect.TypeFor[source.GeneratorOption]()
	if generatorOption.AssignableTo(option) {
		t.Fatal("a GeneratorOption is assignable to Option: Slice and Channel would accept Rate and Count")
	}
	for name, o := range map[string]source.GeneratorOption{
		"Rate":  source.Rate(1, 1),
		"Count": source.Count(1),
	} {
		if reflect.TypeOf(o).Implements(option) {
			t.Errorf("%s's value implements Option", name)
		}
	}
	if !option.AssignableTo(generatorOption) {
		t.Error("an Option is not a GeneratorOption: Track would not reach Generator")
	}
	sliceOpts := reflect.TypeOf(source.Slice[int]).In(1).Elem()
	chanOpts := reflect.TypeOf(source.Channel[int]).In(1).Elem()
	genOpts := reflect.TypeOf(source.Generator[int]).In(1).Elem()
	if sliceOpts != option || chanOpts != option || genOpts != generatorOption {
		t.Errorf("option parameters: Slice %v, Channel %v, Generator %v", sliceOpts, chanOpts, genOpts)
	}
}

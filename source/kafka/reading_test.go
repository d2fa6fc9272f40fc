package kafka_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// runHeld runs src into a holder until the test ends.
func runHeld(t *testing.T, src *kafka.Source) *holder {
	t.Helper()
	h := &holder{}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		src.Close(context.Background())
	})
	return h
}

// A source paused before it runs fetches nothing, whether its topics are
// named or matched by a regex (then the pause learns them on assignment,
// which franz-go calls before it fetches); resumed, it reads everything.
func TestPauseReadingHoldsTopicsFromAssignment(t *testing.T) {
	for _, regex := range []bool{false, true} {
		t.Run("regex="+strconv.FormatBool(regex), func(t *testing.T) {
			brokers := testenv.Kfake(t, 2, "in")
			testenv.Produce(t, brokers, "in", 200, func(i int) []byte { return []byte(strconv.Itoa(i)) })
			src := newSource(t, brokers, "paused", func(c *kafka.Config) {
				if regex {
					c.Regex, c.Topics = true, []string{"^in$"}
				}
			})
			src.PauseReading()
			src.PauseReading() // a no-op: one pause
			h := runHeld(t, src)
			eventually(t, "both partitions assigned", func() bool { return len(src.Stats().Partitions) == 2 })
			if got := src.Client().PauseFetchTopics(); !slices.Equal(got, []string{"in"}) {
				t.Fatalf("paused topics %v, want [in]", got)
			}
			if got := src.Topics(); !slices.Equal(got, []string{"in"}) && !(regex && got == nil) {
				t.Fatalf("Topics() = %v", got)
			}
			// Not a timing assertion: a fetch that got through would show
			// here; a slow machine only gives it less time to.
			time.Sleep(300 * time.Millisecond)
			if st := src.Stats(); st.Records != 0 || !st.ReadingPaused || st.ReadingPauses != 1 {
				t.Fatalf("paused: records %d, reading paused %v, pauses %d; want 0, true, 1", st.Records, st.ReadingPaused, st.ReadingPauses)
			}
			src.ResumeReading()
			eventually(t, "every record after the resume", func() bool { return src.Stats().Records == 200 })
			if got := src.Client().PauseFetchTopics(); len(got) != 0 {
				t.Fatalf("paused topics %v after the resume", got)
			}
			// Stats count a record when it is polled; the holder gets it
			// a moment later, through the graph.
			held := 0
			eventually(t, "the holder to get every record", func() bool {
				held += h.settleAll()
				return held >= 200
			})
			if held != 200 {
				t.Fatalf("held %d, want 200", held)
			}
		})
	}
}

// The two pauses do not fight: a partition that flow control resumes (its
// unsettled records settled) stays unfetched while its source's reading
// is paused, and the source's resume does not lift a flow pause.
func TestPauseReadingAndFlowControlAreIndependent(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 500, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "both", func(c *kafka.Config) {
		c.MaxUnsettledPerPartition = 50
		c.MaxPollRecords = 10
		c.Opts = append(c.Opts, kgo.FetchMaxBytes(1000), kgo.FetchMaxPartitionBytes(1000))
	})
	h := runHeld(t, src)
	eventually(t, "a flow pause", func() bool {
		st := src.Stats()
		return len(st.Partitions) == 1 && st.Partitions[0].Paused
	})
	src.PauseReading()
	before := src.Stats().Records
	h.settleAll()
	// The settles resume the partition (flow control); the topic pause
	// holds it. Records already polled when the pause started may still
	// arrive: one poll, and the holder's flow pause of it.
	eventually(t, "the flow resume", func() bool {
		h.settleAll()
		st := src.Stats()
		return !st.Partitions[0].Paused
	})
	if got := src.Client().PauseFetchPartitions(nil); len(got["in"]) != 0 {
		t.Fatalf("partitions paused %v after the flow resume", got)
	}
	time.Sleep(300 * time.Millisecond) // see TestPauseReadingHoldsTopicsFromAssignment
	if st := src.Stats(); st.Records > before+10 {
		t.Fatalf("records went from %d to %d while reading was paused", before, st.Records)
	}
	src.ResumeReading()
	eventually(t, "every record", func() bool {
		h.settleAll()
		return src.Stats().Records == 500
	})
}

package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// prioRig is a strict priority source over a high and a low Kafka level
// (one topic and group each), into a slow stage that holds everything
// until open is called, then a checkpoint sink committing through both.
type prioRig struct {
	t         *testing.T
	brokers   []string
	high, low *kafka.Source
	gate      chan struct{}
	seen      *seenValues
	cancel    context.CancelFunc
	done      chan error
}

// seenValues counts the values a pipeline (or several) processed.
type seenValues struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *seenValues) add(v string) {
	s.mu.Lock()
	s.n[v]++
	s.mu.Unlock()
}

// count returns how many distinct values with prefix were seen, and how
// many were seen more than once.
func (s *seenValues) count(prefix string) (distinct, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v, n := range s.n {
		if len(v) >= len(prefix) && v[:len(prefix)] == prefix {
			distinct++
			if n > 1 {
				dups++
			}
		}
	}
	return distinct, dups
}

func levelSource(t *testing.T, brokers []string, topic string, balancer kgo.GroupBalancer) *kafka.Source {
	return newSource(t, brokers, "group-"+topic, func(c *kafka.Config) {
		c.Topics = []string{topic}
		c.Balancer = balancer
		c.MaxPollRecords = 50
		c.Opts = append(c.Opts, kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(100*time.Millisecond),
			kgo.RebalanceTimeout(2*time.Second))
	})
}

// The low level's group uses balancer (nil: the source's default).
func startPrioRig(t *testing.T, brokers []string, seen *seenValues, balancer kgo.GroupBalancer) *prioRig {
	r := &prioRig{t: t, brokers: brokers, gate: make(chan struct{}), seen: seen, done: make(chan error, 1)}
	r.high, r.low = levelSource(t, brokers, "prio-high", nil), levelSource(t, brokers, "prio-low", balancer)
	g := stream.New(stream.WithLogger(quiet), stream.WithBatchSize(16), stream.WithCapacity(16))
	s := source.Priority(g, backpressure.StrictPriority(2),
		[]source.Level[[]byte]{{Name: "high", Source: r.high}, {Name: "low", Source: r.low}}, stream.Buffer(64))
	n := 0
	s = stream.Via(s, stream.FlowFunc[[]byte, []byte](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil
		}
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for _, m := range b.Items {
				r.seen.add(string(m.Value))
				if n++; n%2 == 0 {
					time.Sleep(time.Millisecond) // a slow downstream
				}
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
			b.Release()
		}
	}))
	both := stream.CommitterFunc(func(ctx context.Context) error {
		return errors.Join(r.high.Commit(ctx), r.low.Commit(ctx))
	})
	stream.To(s, checkpoint.New[[]byte](both, checkpoint.Interval(50*time.Millisecond)))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- g.Run(ctx) }()
	return r
}

func (r *prioRig) open() { close(r.gate) }

// stop cancels the pipeline, checks it ended cleanly, and closes the
// sources (their final commit).
func (r *prioRig) stop() {
	r.t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		r.t.Fatal(err)
	}
	for _, s := range []*kafka.Source{r.high, r.low} {
		if err := s.Close(context.Background()); err != nil {
			r.t.Fatal(err)
		}
	}
}

// lowPaused waits until the low level is paused at its client (and high
// is not), then returns the low source's records so far.
func (r *prioRig) lowPaused() int64 {
	r.t.Helper()
	eventually(r.t, "low's topic paused at its client", func() bool {
		return slices.Equal(r.low.Client().PauseFetchTopics(), []string{"prio-low"}) && r.low.Stats().ReadingPaused
	})
	if got := r.high.Client().PauseFetchTopics(); len(got) != 0 || r.high.Stats().ReadingPaused {
		r.t.Fatalf("high's paused topics: %v", got)
	}
	return r.low.Stats().Records
}

// lowStill checks that low's consumed position did not advance past the
// records already polled when it was paused (at most one poll of
// MaxPollRecords, 50, in flight then), while high still lags.
func (r *prioRig) lowStill(records int64) {
	r.t.Helper()
	// Not a timing assertion: a fetch that got through would show here;
	// a slow machine only gives it less time to.
	time.Sleep(300 * time.Millisecond)
	if got := r.low.Stats().Records; got > records+50 {
		r.t.Fatalf("low's records went from %d to %d while paused", records, got)
	}
	if lag := r.high.Lag(); lag == 0 {
		r.t.Fatalf("high has no lag left: the test's backlog is too small to show a pause")
	}
	if !slices.Equal(r.low.Client().PauseFetchTopics(), []string{"prio-low"}) {
		r.t.Fatal("low resumed while high lags")
	}
}

// committedAll waits until group's committed offsets of topic add up to n.
func committedAll(t *testing.T, brokers []string, group, topic string, n int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var last map[int32]int64
	eventually(t, fmt.Sprintf("%s's commits of %s adding up to %d", group, topic, n), func() bool {
		last = testenv.CommittedOffsets(context.Background(), cl, group, topic)
		var sum int64
		for _, off := range last {
			sum += off
		}
		return sum == n
	})
}

// High has a backlog and downstream is slow: low's topic is paused at its
// client and low stops fetching while high lags; once high drains, low is
// resumed, and every record of both levels is processed once and
// committed.
func TestPriorityPausesLowTopicWhileHighLags(t *testing.T) {
	if testing.Short() {
		t.Skip("lets lag build on real topics: make test runs it, -short does not")
	}
	const n = 1500
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, "prio-high", "prio-low"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	testenv.Produce(t, brokers, "prio-high", n, func(i int) []byte { return fmt.Appendf(nil, "h%d", i) })
	testenv.Produce(t, brokers, "prio-low", n, func(i int) []byte { return fmt.Appendf(nil, "l%d", i) })
	seen := &seenValues{n: map[string]int{}}
	r := startPrioRig(t, brokers, seen, nil)

	r.lowStill(r.lowPaused())
	r.open()
	eventually(t, "every record of both levels", func() bool {
		h, _ := seen.count("h")
		l, _ := seen.count("l")
		return h == n && l == n
	})
	eventually(t, "low resumed", func() bool {
		return len(r.low.Client().PauseFetchTopics()) == 0 && !r.low.Stats().ReadingPaused
	})
	committedAll(t, brokers, "group-prio-high", "prio-high", n)
	committedAll(t, brokers, "group-prio-low", "prio-low", n)
	_, hd := seen.count("h")
	_, ld := seen.count("l")
	if hd+ld != 0 {
		t.Fatalf("%d high and %d low records processed twice without a rebalance", hd, ld)
	}
	t.Logf("low paused %d times", r.low.Stats().ReadingPauses)
	r.stop()
}

// A rebalance of the low level's group while it is paused: a member that
// joins takes some of low's partitions and reads them (its client is not
// paused); when it leaves, the partitions come back to the paused member
// and stay unfetched; when high drains, everything is resumed, nothing is
// left paused at the client, and every low record is processed and
// committed. With the cooperative-sticky balancer (the default) and the
// eager range one, which revokes everything and assigns it again.
func TestPriorityPauseSurvivesRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalances a group while a level is paused: make test runs it, -short does not")
	}
	for _, c := range []struct {
		name     string
		balancer kgo.GroupBalancer
	}{{"cooperative-sticky", nil}, {"range", kgo.RangeBalancer()}} {
		t.Run(c.name, func(t *testing.T) { pauseSurvivesRebalance(t, c.balancer) })
	}
}

func pauseSurvivesRebalance(t *testing.T, balancer kgo.GroupBalancer) {
	const n = 1500
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, "prio-high"), kfake.SeedTopics(4, "prio-low"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	testenv.Produce(t, brokers, "prio-high", n, func(i int) []byte { return fmt.Appendf(nil, "h%d", i) })
	testenv.Produce(t, brokers, "prio-low", n, func(i int) []byte { return fmt.Appendf(nil, "l%d", i) })
	seen := &seenValues{n: map[string]int{}}
	r := startPrioRig(t, brokers, seen, balancer)
	records := r.lowPaused()

	// B joins the low group and reads what the rebalance gives it.
	b := levelSource(t, brokers, "prio-low", balancer)
	gb := stream.New(stream.WithLogger(quiet))
	stream.To(stream.Via(stream.From(gb, b), stream.FlowFunc[[]byte, []byte](
		func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
			for {
				bt, err := in.Recv(ctx)
				if err != nil {
					return nil
				}
				for _, m := range bt.Items {
					seen.add(string(m.Value))
					if err := out.Send(ctx, m); err != nil {
						return err
					}
				}
				bt.Release()
			}
		})), checkpoint.New[[]byte](b, checkpoint.Interval(50*time.Millisecond)))
	ctxB, cancelB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- gb.Run(ctxB) }()
	eventually(t, "B taking partitions from the paused member and reading them", func() bool {
		return len(r.low.Stats().Partitions) < 4 && b.Stats().Records > 0
	})
	r.lowStill(records)

	// B leaves: its partitions go back to the paused member, paused.
	cancelB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the paused member owning every low partition again", func() bool { return len(r.low.Stats().Partitions) == 4 })
	r.lowStill(records)

	r.open()
	eventually(t, "every record of both levels", func() bool {
		h, _ := seen.count("h")
		l, _ := seen.count("l")
		return h == n && l == n
	})
	eventually(t, "nothing paused at low's client", func() bool {
		return len(r.low.Client().PauseFetchTopics()) == 0 && len(r.low.Client().PauseFetchPartitions(nil)) == 0
	})
	committedAll(t, brokers, "group-prio-low", "prio-low", n)
	committedAll(t, brokers, "group-prio-high", "prio-high", n)
	_, ld := seen.count("l")
	t.Logf("low: %d records processed twice (redone after the rebalance), %d pauses", ld, r.low.Stats().ReadingPauses)
	r.stop()
}

package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// rebalanceTest runs three members of one group that join and leave while
// they consume: every record is processed (0 lost) and, per partition,
// commits never go back, whichever member makes them.
func rebalanceTest(t *testing.T, brokers []string, topic string) {
	const n = 60_000
	testenv.Produce(t, brokers, topic, n, func(i int) []byte { return strconv.AppendInt(nil, int64(i), 10) })

	var mu sync.Mutex
	seen := map[string]int{}
	lastCommit := map[int32]int64{}
	var regressions []string
	onCommit := func(_ string, p int32, off int64) {
		mu.Lock()
		defer mu.Unlock()
		if off < lastCommit[p] {
			regressions = append(regressions, strconv.Itoa(int(p))+": "+strconv.FormatInt(lastCommit[p], 10)+" -> "+strconv.FormatInt(off, 10))
		}
		lastCommit[p] = off
	}
	type member struct {
		cancel context.CancelFunc
		done   chan error
		src    *kafka.Source
	}
	startMember := func() *member {
		src := newSource(t, brokers, "rebalance-"+topic, func(c *kafka.Config) {
			c.Topics = []string{topic}
			c.OnCommit = onCommit
			c.MaxUnsettledPerPartition = 200
			c.Opts = append(c.Opts, kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(200*time.Millisecond))
		})
		ctx, cancel := context.WithCancel(context.Background())
		g := stream.New(stream.WithLogger(quiet))
		s := stream.Via(stream.From(g, stream.Source[[]byte](src)), stream.Flow[[]byte, []byte](flow.MapAsync(8,
			func(_ context.Context, v []byte) ([]byte, error) {
				time.Sleep(50 * time.Microsecond) // slow enough that members overlap
				mu.Lock()
				seen[string(v)]++
				mu.Unlock()
				return v, nil
			})))
		stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond), checkpoint.Every(500)))
		m := &member{cancel: cancel, done: make(chan error, 1), src: src}
		go func() { m.done <- g.Run(ctx) }()
		return m
	}
	stopMember := func(m *member) {
		m.cancel()
		if err := <-m.done; err != nil {
			t.Errorf("member run: %v", err)
		}
		if err := m.src.Close(context.Background()); err != nil {
			t.Logf("member close: %v", err)
		}
	}
	progress := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	waitFor := func(k int) {
		deadline := time.Now().Add(60 * time.Second)
		for progress() < k && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	a := startMember()
	waitFor(n / 6)
	b := startMember()
	waitFor(n / 3)
	c := startMember()
	waitFor(n / 2)
	stopMember(a)
	waitFor(2 * n / 3)
	stopMember(b)
	waitFor(n)
	stopMember(c)

	mu.Lock()
	defer mu.Unlock()
	lost, dups := 0, 0
	for i := range n {
		switch k := seen[strconv.Itoa(i)]; {
		case k == 0:
			lost++
		case k > 1:
			dups += k - 1
		}
	}
	t.Logf("%d records, 3 members joining and leaving: lost %d, duplicates %d; commit regressions %v", n, lost, dups, regressions)
	if lost != 0 || len(regressions) != 0 {
		t.Fatalf("lost %d, commit regressions %v", lost, regressions)
	}
}

func TestRebalanceKfake(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(crashParts, "in"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	rebalanceTest(t, brokers, "in")
}

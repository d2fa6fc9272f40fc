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

// A member that gives partitions up in a rebalance (another member
// joined) lets the records of those partitions it already sent downstream
// be processed and settled before it commits and hands them over, so that
// the new owner does not process them again. Before, the revocation
// committed only what was settled at that instant, and every record
// between the stages was processed twice.
func TestGracefulHandoverProcessesNothingTwice(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(4, "in"))
	const n = 800
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	var mu sync.Mutex
	seen := map[string]int{}
	member := func(perRecord time.Duration) (src *kafka.Source, stop func()) {
		src = newSource(t, brokers, "handover", func(c *kafka.Config) {
			// The eager balancer revokes every partition, the one whose
			// records are between the stages among them.
			c.Balancer = kgo.RangeBalancer()
			c.Opts = append(c.Opts, kgo.HeartbeatInterval(100*time.Millisecond))
		})
		return src, runCounting(t, src, nil, func(v []byte) {
			time.Sleep(perRecord) // records are always between the stages
			mu.Lock()
			seen[string(v)]++
			mu.Unlock()
		})
	}
	a, stopA := member(2 * time.Millisecond)
	eventually(t, "A reading all four partitions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(a.Stats().Partitions) == 4 && len(seen) > 40
	})
	_, stopB := member(0)
	twice := processedTwiceOnceAll(t, &mu, seen, n, stopA, stopB)
	if st := a.Stats(); twice > 0 || st.Revoked == 0 {
		t.Fatalf("%d records processed twice; A's revocations %d, settles ignored as late %d", twice, st.Revoked, st.LateSettles)
	}
}

// runCounting runs src -> a stage calling each for every record ->
// checkpoint sink (commits every 20 ms), on small pipes (capacity 16,
// batches of 4) so that records are between the stages, with opts; the
// function it returns stops the pipeline and closes src.
func runCounting(t *testing.T, src *kafka.Source, opts []stream.Option, each func(v []byte)) func() {
	t.Helper()
	g := stream.New(append([]stream.Option{stream.WithLogger(quiet), stream.WithCapacity(16), stream.WithBatchSize(4)}, opts...)...)
	s := stream.Via(stream.From(g, src), flow.Map(func(v []byte) ([]byte, error) {
		each(v)
		return v, nil
	}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		src.Close(context.Background())
	}
}

// processedTwiceOnceAll waits until all n records are in seen (guarded by
// mu), stops the members, and counts the records processed twice.
func processedTwiceOnceAll(t *testing.T, mu *sync.Mutex, seen map[string]int, n int, stops ...func()) int {
	t.Helper()
	eventually(t, "every record processed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	for _, stop := range stops {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	return processedTwice(seen)
}

// processedTwice counts the records of seen (times processed, by value)
// processed more than once, each extra time.
func processedTwice(seen map[string]int) int {
	twice := 0
	for _, k := range seen {
		twice += k - 1
	}
	return twice
}

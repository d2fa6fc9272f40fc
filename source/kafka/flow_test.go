package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// holder is a sink that keeps messages unsettled until told to settle them.
type holder struct {
	mu   sync.Mutex
	held []stream.Message[[]byte]
}

func (h *holder) Run(ctx context.Context, in *stream.Inlet[[]byte]) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			return nil
		}
		h.mu.Lock()
		h.held = append(h.held, b.Items...)
		h.mu.Unlock()
		b.Release()
	}
}

func (h *holder) settleAll() int {
	h.mu.Lock()
	ms := h.held
	h.held = nil
	h.mu.Unlock()
	for i := range ms {
		ms[i].Settle(stream.Completed)
	}
	return len(ms)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUnsettledCapPausesAndResumesAPartition(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 1000, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := newSource(t, brokers, "pause", func(c *kafka.Config) {
		c.MaxUnsettledPerPartition = 100
		c.MaxPollRecords = 10
		c.Opts = append(c.Opts, kgo.FetchMaxBytes(1000), kgo.FetchMaxPartitionBytes(1000))
	})
	h := &holder{}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	t.Cleanup(func() { src.Close(context.Background()) })
	settled := 0
	for settled < 1000 {
		eventually(t, "a pause", func() bool {
			st := src.Stats()
			return len(st.Partitions) == 1 && (st.Partitions[0].Paused || st.Records == 1000)
		})
		st := src.Stats()
		// The cap holds up to one fetch (FetchMaxBytes 1000: a few records).
		if u := st.Partitions[0].Unsettled; u > 100+60 {
			t.Fatalf("%d unsettled with a cap of 100", u)
		}
		// Pending is what the pause counts: a paused partition resumes
		// once settles bring it down to half the cap, so while paused it
		// holds more than that (it paused at the cap, and records settled
		// since, by this loop, may have brought it below the cap).
		if p := st.Partitions[0]; p.Paused && (p.Pending <= 50 || p.Pending < p.Unsettled) {
			t.Fatalf("paused with %d pending and %d unsettled, cap 100", p.Pending, p.Unsettled)
		}
		before := src.Stats().Pauses
		settled += h.settleAll()
		if settled < 1000 {
			// Resumed, or resumed and already paused again by the next
			// fetches: either way fetching went on. Records still on their
			// way to the holder when it settled count as unsettled, so
			// settle those too as they arrive (as any sink would).
			eventually(t, "a resume", func() bool {
				st := src.Stats()
				if !st.Partitions[0].Paused || st.Pauses > before || st.Records == 1000 {
					return true
				}
				settled += h.settleAll()
				return false
			})
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := src.Stats()
	if st.Pauses < 5 || st.Records != 1000 {
		t.Fatalf("pauses %d, records %d", st.Pauses, st.Records)
	}
}

func TestSettlesAfterRevocationAreIgnored(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(4, "in"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	testenv.Produce(t, brokers, "in", 400, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	var mu sync.Mutex
	type commit struct {
		at  time.Time
		p   int32
		off int64
	}
	var aCommits []commit
	srcA := newSource(t, brokers, "fence", func(c *kafka.Config) {
		c.OnCommit = func(_ string, p int32, off int64) {
			mu.Lock()
			aCommits = append(aCommits, commit{time.Now(), p, off})
			mu.Unlock()
		}
		c.Opts = append(c.Opts, kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	})
	h := &holder{}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, srcA), h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	eventually(t, "A holding all records", func() bool { return srcA.Stats().Records == 400 })

	// B joins: the cooperative rebalance takes about half of A's partitions.
	// B heartbeats as often as A: kfake expires a member that waits in
	// JoinGroup longer than its session timeout (Kafka does not), and A,
	// which waits HandoverWait for its held records when it gives
	// partitions up, would wait there for B's next heartbeat (3 s).
	srcB := newSource(t, brokers, "fence", func(c *kafka.Config) {
		c.Opts = append(c.Opts, kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	})
	gb := stream.New(stream.WithLogger(quiet))
	hb := &holder{}
	stream.To(stream.From(gb, srcB), hb)
	ctxB, cancelB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() { doneB <- gb.Run(ctxB) }()
	eventually(t, "A losing partitions to B", func() bool { return len(srcA.Stats().Partitions) < 4 })
	revokedAt := time.Now()
	owned := map[int32]bool{}
	for _, p := range srcA.Stats().Partitions {
		owned[p.Partition] = true
	}

	// A settles everything it held, the revoked partitions' records included.
	h.settleAll()
	if err := srcA.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := srcA.Stats()
	if st.LateSettles == 0 {
		t.Fatal("no settle was fenced although partitions were revoked with records unsettled")
	}
	// A committed, for each revoked partition, only what was settled when
	// it gave the partition up: nothing, so offset 0. Had a late settle got
	// through, A's offsets for those partitions would have moved on.
	mu.Lock()
	for _, c := range aCommits {
		if !owned[c.p] && c.off > 0 {
			t.Errorf("A committed offset %d of revoked partition %d (at %v, revoked by %v)", c.off, c.p, c.at, revokedAt)
		}
	}
	mu.Unlock()
	t.Logf("A kept partitions %v; %d late settles ignored", owned, st.LateSettles)

	cancel()
	cancelB()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	srcA.Close(context.Background())
	srcB.Close(context.Background())
}

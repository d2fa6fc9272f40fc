package benchmarks

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// groupMember is one member of the group under test, either
// implementation.
type groupMember interface {
	// held returns the partitions the member holds now.
	held() []int32
	// generation is the group generation (classic) or member epoch
	// (consumer protocol) the member is in.
	generation() int32
	// refused counts commits the broker refused.
	refused() int64
	// close stops the member gracefully: what it processed is committed
	// and it leaves the group.
	close()
}

// scaleMemberConfig is what both implementations share.
type scaleMemberConfig struct {
	brokers []string
	group   string
	topic   string
	kip848  bool
	tally   *tally
}

// groupOpts are the client options both implementations add: a heartbeat
// every 500 ms (a member hears of a rebalance that soon; the consumer
// protocol takes its interval from the broker instead).
func groupOpts() []kgo.Opt {
	return []kgo.Opt{kgo.HeartbeatInterval(500 * time.Millisecond)}
}

// sluiceMember is a sluice pipeline: the Kafka group source, a stage that
// records each record in the tally, the checkpoint sink.
type sluiceMember struct {
	src    *kafka.Source
	cancel context.CancelFunc
	done   chan error
}

func startSluiceMember(c scaleMemberConfig) (groupMember, error) {
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: c.brokers}, Group: c.group, Topics: []string{c.topic},
		Logger: slog.New(slog.DiscardHandler), Opts: groupOpts()}
	if c.kip848 {
		cfg.Protocol = kafka.ProtocolConsumer
	}
	src, err := kafka.NewSource(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	s := stream.Via(stream.From(g, src), flow.FilterMessages(func(m *stream.Message[[]byte]) bool {
		c.tally.processed(m.Partition, m.Offset)
		return true
	}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.WithLogger(slog.New(slog.DiscardHandler))))
	m := &sluiceMember{src: src, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- g.Run(ctx) }()
	return m, nil
}

func (m *sluiceMember) held() []int32 {
	st := m.src.Stats()
	ps := make([]int32, len(st.Partitions))
	for i, p := range st.Partitions {
		ps[i] = p.Partition
	}
	return ps
}

func (m *sluiceMember) generation() int32 {
	_, gen := m.src.Client().GroupMetadata()
	return gen
}

func (m *sluiceMember) refused() int64 { return m.src.Stats().CommitErrors }

func (m *sluiceMember) close() {
	m.cancel()
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.src.Close(ctx) // a failed commit is counted in CommitErrors
}

// handMember is the same member written on franz-go directly, as its
// documentation suggests: rebalances blocked while a poll's records are
// processed, each processed record marked, marks committed every second
// and, for the partitions revoked, in OnPartitionsRevoked.
type handMember struct {
	cl      *kgo.Client
	cancel  context.CancelFunc
	done    chan struct{}
	owned   atomic.Pointer[[]int32]
	refuses atomic.Int64
}

func startHandMember(c scaleMemberConfig) (groupMember, error) {
	m := &handMember{done: make(chan struct{})}
	m.owned.Store(&[]int32{})
	opts := append(groupOpts(),
		kgo.SeedBrokers(c.brokers...),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.AutoCommitCallback(func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			m.countRefused(resp, err)
		}),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.change(a[c.topic], nil) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				m.refuses.Add(1)
			}
			m.change(nil, r[c.topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) { m.change(nil, l[c.topic]) }),
	)
	if c.kip848 {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.poll(ctx, c.tally)
	return m, nil
}

func (m *handMember) poll(ctx context.Context, t *tally) {
	defer close(m.done)
	for {
		fs := m.cl.PollRecords(ctx, 10_000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			m.cl.AllowRebalance()
			return
		}
		fs.EachRecord(func(r *kgo.Record) { t.processed(r.Partition, r.Offset) })
		m.cl.MarkCommitRecords(fs.Records()...)
		m.cl.AllowRebalance()
	}
}

// countRefused counts a commit the broker refused in part or whole.
func (m *handMember) countRefused(resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		m.refuses.Add(1)
		return
	}
	if resp == nil {
		return
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if kerr.ErrorForCode(p.ErrorCode) != nil {
				m.refuses.Add(1)
				return
			}
		}
	}
}

// change applies a callback's partitions gained and given up.
func (m *handMember) change(gained, gone []int32) {
	cur := slices.Clone(*m.owned.Load())
	cur = slices.DeleteFunc(cur, func(p int32) bool { return slices.Contains(gone, p) })
	cur = append(cur, gained...)
	m.owned.Store(&cur)
}

func (m *handMember) held() []int32 { return *m.owned.Load() }

func (m *handMember) generation() int32 {
	_, gen := m.cl.GroupMetadata()
	return gen
}

func (m *handMember) refused() int64 { return m.refuses.Load() }

func (m *handMember) close() {
	m.cancel()
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cl.CommitMarkedOffsets(ctx); err != nil {
		m.refuses.Add(1)
	}
	m.cl.Close() // leaves the group: OnPartitionsRevoked commits once more
}

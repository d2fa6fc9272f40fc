package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// churnTest runs members of one consumer group that join, leave and crash
// every few hundred milliseconds while a slow pipeline keeps a backlog, and
// checks what a re-assignment must never do:
//   - commit an offset above a record that no member has processed yet;
//   - move a partition's committed offset backwards (the broker's committed
//     offsets are polled every 100 ms);
//   - lose a record: after the churn, a last member reads from the committed
//     offsets to the end, and every produced record must have been
//     processed at least once.
//
// The conditions that provoke re-assignment bugs (../shared/notes): the
// balancer under test (the eager range balancer revokes everything on every
// rebalance and often hands the same partitions straight back), large
// unsettled caps and polls of hundreds to thousands of records, a slow
// stage that keeps a backlog, an unordered async stage with a slow tail,
// churn in bursts, and crashes simulated by cutting a member's connections
// and removing it from the group on its behalf.
func churnTest(t *testing.T, brokers []string, topic string, partitions int32, balancer kgo.GroupBalancer, churnFor time.Duration,
	opts ...kgo.Opt) {
	const n = 200_000
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d", seed)
	w := produceIndexed(t, brokers, topic, partitions, n)
	group := "churn-" + topic

	var violations, regressions []string
	var vmu sync.Mutex
	violate := func(list *[]string, format string, a ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		if len(*list) < 20 {
			*list = append(*list, fmt.Sprintf(format, a...))
		}
	}
	var commits atomic.Int64
	onCommit := func(_ string, p int32, off int64) {
		commits.Add(1)
		if low := w.lowestUnprocessed(p); off > low {
			violate(&violations, "partition %d committed at %d while offset %d was never processed", p, off, low)
		}
	}

	// The broker's committed offsets, polled: they must never go back.
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		last := map[int32]int64{}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
			for p, off := range testenv.CommittedOffsets(pollCtx, admin, group, topic) {
				if off < last[p] {
					violate(&regressions, "partition %d: committed offset went back from %d to %d", p, last[p], off)
				}
				last[p] = max(last[p], off)
			}
		}
	}()

	var members []*churnMember
	start := func() {
		members = append(members, startChurnMember(t, brokers, group, topic, balancer, rng, w, onCommit, opts))
	}
	pick := func() *churnMember {
		i := rng.IntN(len(members))
		m := members[i]
		members = append(members[:i], members[i+1:]...)
		return m
	}
	var joins, leaves, crashes int
	// Members stop and crash in the background, as they would in a fleet:
	// the next change does not wait for a drain.
	var stopping sync.WaitGroup
	start()
	deadline := time.Now().Add(churnFor)
	for time.Now().Before(deadline) {
		// A burst of changes every 200-500 ms for 2-4 s, then 1-2 s quiet.
		burstEnd := time.Now().Add(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		for time.Now().Before(burstEnd) {
			switch r := rng.IntN(10); {
			case len(members) < 2 || (r < 4 && len(members) < 4):
				start()
				joins++
			case r < 7:
				m := pick()
				stopping.Go(func() { m.stop(t) })
				leaves++
			default:
				m := pick()
				stopping.Go(func() { m.crash(t, admin, group) })
				crashes++
			}
			time.Sleep(time.Duration(200+rng.IntN(300)) * time.Millisecond)
		}
		time.Sleep(time.Duration(1000+rng.IntN(1000)) * time.Millisecond)
	}
	for _, m := range members {
		stopping.Go(func() { m.stop(t) })
	}
	stopping.Wait()
	churned := time.Now()
	// The last member reads from the committed offsets to the end.
	last := startChurnMember(t, brokers, group, topic, balancer, rng, w, onCommit, opts)
	drained := time.Now().Add(2 * time.Minute)
	for w.unprocessed() > 0 && time.Now().Before(drained) {
		time.Sleep(50 * time.Millisecond)
	}
	last.stop(t)
	stopPoll()
	<-polled

	lost := w.unprocessed()
	t.Logf("%d records, %d partitions: %d joins, %d leaves, %d crashes in %v, %d commits, last member %v; processed %d times in all (%d duplicates); lost %d",
		n, partitions, joins, leaves, crashes, churnFor, commits.Load(), time.Since(churned).Round(time.Millisecond),
		w.calls.Load(), w.calls.Load()-int64(n-lost), lost)
	if lost > 0 || len(violations) > 0 || len(regressions) > 0 {
		t.Fatalf("lost %d records (first: %v); commits above unprocessed records: %v; committed offsets that went back: %v",
			lost, w.firstUnprocessed(), violations, regressions)
	}
}

// indexed is the produced topic: record i is at where[i], and processed
// holds, per partition, which offsets some member has processed.
type indexed struct {
	where []position
	parts []*processedSet
	calls atomic.Int64
}

type position struct {
	partition int32
	offset    int64
}

type processedSet struct {
	mu   sync.Mutex
	done []bool
	low  int64 // lowest offset not processed
}

func (w *indexed) process(i uint64) {
	w.calls.Add(1)
	pos := w.where[i]
	ps := w.parts[pos.partition]
	ps.mu.Lock()
	ps.done[pos.offset] = true
	for ps.low < int64(len(ps.done)) && ps.done[ps.low] {
		ps.low++
	}
	ps.mu.Unlock()
}

func (w *indexed) lowestUnprocessed(p int32) int64 {
	ps := w.parts[p]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.low
}

func (w *indexed) unprocessed() int {
	k := 0
	for _, ps := range w.parts {
		ps.mu.Lock()
		for _, d := range ps.done[ps.low:] {
			if !d {
				k++
			}
		}
		ps.mu.Unlock()
	}
	return k
}

func (w *indexed) firstUnprocessed() []position {
	var out []position
	for p, ps := range w.parts {
		ps.mu.Lock()
		if ps.low < int64(len(ps.done)) {
			out = append(out, position{int32(p), ps.low})
		}
		ps.mu.Unlock()
	}
	return out
}

// produceIndexed writes n records whose value is their index (8 bytes, then
// padding to 100 bytes), spread round robin over the partitions.
func produceIndexed(t *testing.T, brokers []string, topic string, partitions int32, n int) *indexed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(50_000))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w := &indexed{where: make([]position, n), parts: make([]*processedSet, partitions)}
	counts := make([]int64, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const chunk = 10_000
	for from := 0; from < n; from += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for i := from; i < min(n, from+chunk); i++ {
			v := make([]byte, 100)
			binary.BigEndian.PutUint64(v, uint64(i))
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: v})
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("producing: %v", err)
		}
		for _, r := range res {
			i := binary.BigEndian.Uint64(r.Record.Value)
			w.where[i] = position{r.Record.Partition, r.Record.Offset}
			counts[r.Record.Partition] = max(counts[r.Record.Partition], r.Record.Offset+1)
		}
	}
	for p := range w.parts {
		w.parts[p] = &processedSet{done: make([]bool, counts[p])}
	}
	return w
}

// churnMember is one member of the group: source -> slow stage -> unordered
// async stage with a slow tail -> checkpoint.
type churnMember struct {
	dead   atomic.Bool // crashed: its calls in flight die with it
	src    *kafka.Source
	dialer *cutDialer
	cancel context.CancelFunc
	done   chan error
}

func startChurnMember(t *testing.T, brokers []string, group, topic string, balancer kgo.GroupBalancer, rng *rand.Rand,
	w *indexed, onCommit func(string, int32, int64), opts []kgo.Opt) *churnMember {
	t.Helper()
	d := &cutDialer{conns: map[net.Conn]struct{}{}}
	src := newSource(t, brokers, group, func(c *kafka.Config) {
		c.Topics = []string{topic}
		c.Balancer = balancer
		c.OnCommit = onCommit
		c.MaxUnsettledPerPartition = 2000 + rng.IntN(3000)
		c.MaxPollRecords = 600 + rng.IntN(5400)
		c.Opts = append(c.Opts, kgo.Dialer(d.dial), kgo.SessionTimeout(3*time.Second),
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.RebalanceTimeout(2*time.Second), kgo.RetryTimeout(3*time.Second),
			// Fetches of a few hundred records per partition: a poll spans
			// partitions, as it does with larger records or more partitions.
			kgo.FetchMaxPartitionBytes(int32(8<<10+rng.IntN(56<<10))))
		c.Opts = append(c.Opts, opts...)
	})
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New(stream.WithLogger(quiet), stream.WithCapacity(1024), stream.WithDrainTimeout(5*time.Second))
	s := stream.From(g, src)
	// The slow stage: about 50,000 records a second, so a backlog lasts.
	s = stream.Via(s, flow.Map(func(v []byte) ([]byte, error) {
		if binary.BigEndian.Uint64(v)%64 == 0 {
			time.Sleep(time.Millisecond)
		}
		return v, nil
	}))
	slowSeed := rng.Uint64()
	m := &churnMember{src: src, dialer: d, cancel: cancel, done: make(chan error, 1)}
	s = stream.Via(s, flow.MapAsync(256, func(ctx context.Context, v []byte) ([]byte, error) {
		i := binary.BigEndian.Uint64(v)
		if (i^slowSeed)%300 == 0 { // the slow tail: 0.3-2.5 s
			select {
			case <-time.After(time.Duration(300+(i^slowSeed)%2200) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if m.dead.Load() {
			return nil, stream.Fatal(errors.New("crashed"))
		}
		w.process(i)
		return v, nil
	}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(time.Duration(20+rng.IntN(80))*time.Millisecond), checkpoint.Every(500), checkpoint.WithLogger(quiet)))
	go func() { m.done <- g.Run(ctx) }()
	return m
}

// stop ends the member gracefully: drain, final commit, leave the group.
func (m *churnMember) stop(t *testing.T) {
	m.cancel()
	if err := <-m.done; err != nil && !errors.Is(err, stream.ErrDrainTimeout) {
		t.Errorf("member run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.src.Close(ctx)
}

// crash cuts the member's connections, so that it can neither commit nor
// leave, and removes it from the group on its behalf, as the coordinator
// would once its session expired.
func (m *churnMember) crash(t *testing.T, admin *kgo.Client, group string) {
	memberID, _ := m.src.Client().GroupMetadata()
	m.dead.Store(true)
	m.dialer.cut()
	if memberID != "" {
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group = group
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = memberID
		req.Members = []kmsg.LeaveGroupRequestMember{lm}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = req.RequestWith(ctx, admin)
		cancel()
	}
	m.cancel()
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.src.Close(ctx)
}

// cutDialer dials normally until cut; then it refuses and closes every
// connection it made.
type cutDialer struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func (d *cutDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	down := d.down
	d.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	d.conns[c] = struct{}{}
	return c, nil
}

func (d *cutDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = true
	for c := range d.conns {
		c.Close()
	}
}

// The eager range balancer revokes every partition on every rebalance and
// often hands the same ones straight back: the window in which a held poll
// result could be tracked into the next assignment.
func TestChurnRangeKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("12 s of group churn over 200,000 records: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(8, "churn"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	churnTest(t, brokers, "churn", 8, kgo.RangeBalancer(), 12*time.Second)
}

// The default, cooperative-sticky, moves as few partitions as possible.
func TestChurnCooperativeKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("12 s of group churn over 200,000 records: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(8, "churn"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	churnTest(t, brokers, "churn", 8, kgo.CooperativeStickyBalancer(), 12*time.Second)
}

// The next-generation group protocol (KIP-848, franz-go's
// ServerSideBalancer): the coordinator assigns, and a commit's generation
// is the member epoch, which changes with every assignment of this member.
func TestChurnServerSideKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("12 s of group churn over 200,000 records: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(8, "churn"), kfake.GroupMinSessionTimeout(500*time.Millisecond),
		kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": "3000",
			"group.consumer.heartbeat.interval.ms": "100"}))
	churnTest(t, brokers, "churn", 8, kgo.RangeBalancer(), 12*time.Second, kgo.ServerSideBalancer())
}

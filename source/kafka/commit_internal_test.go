package kafka

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/stream"
)

// A commit that took its list of partitions before a revocation, and got
// the commit lock after it, must not commit the revoked partition: if the
// revocation's own commit failed, that commit would land in the next
// generation, where the partition may belong to another member that has
// committed further already (the offset goes back).
func TestCommitSkipsPartitionsRevokedAfterItsSnapshot(t *testing.T) {
	c := clusterWithHundred(t)
	// Consume and settle everything, commit nothing.
	src, commits, stop := settlingSource(t, c, "fence")
	var p *partition
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		src.mu.Lock()
		p = src.parts[tpKey{"in", 0}]
		src.mu.Unlock()
		if p != nil {
			p.mu.Lock()
			settled := p.n == 0 && p.nextOff == 100
			p.mu.Unlock()
			if settled {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("records not consumed")
		}
	}
	stop()

	// The snapshot a concurrent Commit took, then the revocation, whose
	// own commit fails.
	snapshot := []*partition{p}
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.UnknownServerError, Count: -1})
	src.revoked(context.Background(), src.cl, map[string][]int32{"in": {0}})
	h.Remove()
	src.commitMu.Lock()
	err := src.commitParts(context.Background(), snapshot, false)
	src.commitMu.Unlock()
	if got := commits(); err != nil || len(got) > 0 {
		t.Fatalf("the waiting commit committed the revoked partition at %v (err %v)", got, err)
	}
}

// franz-go reports a loss of nothing (a member without partitions whose
// session ends); a worker logged it as "partitions lost ... map[]" each
// time, which an operator reads as an incident.
func TestLosingNothingIsNotLogged(t *testing.T) {
	var buf strings.Builder
	s := &Source{log: slog.New(slog.NewTextHandler(&buf, nil)), parts: map[tpKey]*partition{}}
	s.lost(context.Background(), nil, map[string][]int32{})
	s.lost(context.Background(), nil, nil)
	if buf.Len() != 0 || s.lostN.Load() != 0 {
		t.Fatalf("losing nothing logged %q and counted %d", buf.String(), s.lostN.Load())
	}
	s.lost(context.Background(), nil, map[string][]int32{"in": {3}})
	if !strings.Contains(buf.String(), "partitions lost") || s.lostN.Load() != 1 {
		t.Fatalf("losing a partition logged %q and counted %d", buf.String(), s.lostN.Load())
	}
}

// clusterWithHundred starts a one-broker kfake cluster with a one-partition
// topic "in" holding the records "0" to "99", closed when the test ends.
func clusterWithHundred(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 100 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// A commit the coordinator refuses with ILLEGAL_GENERATION (the group
// moved to a new generation before this member heard of it: a member
// stopping gracefully while another joins or crashes) is made again once
// the member has rejoined, as for REBALANCE_IN_PROGRESS, instead of
// ending the pipeline's Run with that error. Seen in the churn test:
// "final commit: ... commit (generation 12): churn/0: ILLEGAL_GENERATION".
func TestCommitRefusedForAnOldGenerationIsMadeAgainAfterTheRejoin(t *testing.T) {
	c := clusterWithHundred(t)
	src, commits, stop := settlingSource(t, c, "regen")
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitHundredSettled(t, src)
	// The group really moves on: a second member joins, and the
	// coordinator refuses this member's commit of the old generation.
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.IllegalGeneration, Count: 1})
	defer h.Remove()
	defer joinAsAnotherMember(t, c, "regen", ctx, cancel)()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := src.Commit(cctx); err != nil {
		t.Fatalf("Commit = %v, want the commit made again after the rejoin", err)
	}
	if got := commits(); len(got) == 0 || got[len(got)-1] != 100 { // by the commit made again, or by the revocation
		t.Fatalf("committed %v, want 100 at last", got)
	}
}

// settlingSource reads the topic "in" of c in group (with the changes of
// mut to its configuration) with a pipeline that settles every record and
// commits none; commits returns the offsets
// committed so far (OnCommit), stop ends the pipeline and waits for it.
func settlingSource(t *testing.T, c *kfake.Cluster, group string, mut ...func(*Config)) (src *Source, commits func() []int64, stop func()) {
	t.Helper()
	var mu sync.Mutex
	var offs []int64
	cfg := Config{Conn: Conn{Brokers: c.ListenAddrs()}, Group: group, Topics: []string{"in"},
		Logger: slog.New(slog.DiscardHandler), OnCommit: func(_ string, _ int32, off int64) {
			mu.Lock()
			offs = append(offs, off)
			mu.Unlock()
		}}
	for _, m := range mut {
		m(&cfg)
	}
	src, err := NewSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			in.SettleAll(b.Items, stream.Completed)
			b.Release()
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	commits = func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(offs)
	}
	return src, commits, stop
}

// The coordinator refuses with REBALANCE_IN_PROGRESS a commit that carries
// the group's new generation while the group completes its rebalance
// (this member has rejoined; the assignment is not synced yet). No
// generation is coming after that one: the commit is made again, in the
// same generation, once the rebalance has completed, rather than after
// waiting in vain for another. In a group of 200 members that wait held
// each member's Close up for RejoinWait and kept it in the group through
// more rebalances.
func TestCommitRefusedWhileTheRebalanceCompletesIsMadeAgainInTheSameGeneration(t *testing.T) {
	c := clusterWithHundred(t)
	src, commits, stop := settlingSource(t, c, "completing")
	defer stop()
	waitHundredSettled(t, src)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.RebalanceInProgress, Count: 1})
	defer h.Remove()
	_, gen := src.cl.GroupMetadata()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := src.Commit(cctx); err != nil {
		t.Fatalf("Commit = %v, want the commit made again in generation %d", err, gen)
	}
	if got := commits(); len(got) == 0 || got[len(got)-1] != 100 {
		t.Fatalf("committed %v, want 100 at last", got)
	}
}

// Under the consumer protocol, a broker before Kafka 4.3 refuses with
// STALE_MEMBER_EPOCH a commit whose member epoch is not the latest (the
// member learns of the new one from its next heartbeat). The commit is
// made again rather than failed.
func TestCommitRefusedForAStaleMemberEpochIsMadeAgain(t *testing.T) {
	c := clusterWithHundred(t)
	src, commits, stop := settlingSource(t, c, "stale", func(cfg *Config) { cfg.Protocol = ProtocolConsumer })
	defer stop()
	waitHundredSettled(t, src)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.StaleMemberEpoch, Count: 1})
	defer h.Remove()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := src.Commit(cctx); err != nil {
		t.Fatalf("Commit = %v, want the commit made again", err)
	}
	if got := commits(); len(got) == 0 || got[len(got)-1] != 100 {
		t.Fatalf("committed %v, want 100 at last", got)
	}
}

// A commit made while this member's own JoinGroup and SyncGroup are in
// flight would carry a generation the coordinator refuses (the old one
// once the group has moved on, ILLEGAL_GENERATION; the new one before the
// assignment is synced, REBALANCE_IN_PROGRESS). It waits for the rejoin
// instead of being refused: in a rolling restart of 200 members, such
// refusals counted in the hundreds in sluice_kafka_commit_errors_total,
// where an alert on commit errors watches.
func TestCommitWaitsForTheMembersOwnRejoin(t *testing.T) {
	c := clusterWithHundred(t)
	src, commits, stop := settlingSource(t, c, "ownjoin", func(cfg *Config) {
		cfg.Opts = append(cfg.Opts, kgo.HeartbeatInterval(100*time.Millisecond))
	})
	defer stop()
	waitHundredSettled(t, src)
	_, gen := src.cl.GroupMetadata()
	// The coordinator holds every SyncGroup until released: the group
	// stays in the rebalance that a second member starts.
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	defer open()
	c.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer joinAsAnotherMember(t, c, "ownjoin", ctx, cancel)()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, g := src.cl.GroupMetadata(); g > gen {
			break // joined the next generation, not synced
		}
		if time.Now().After(deadline) {
			t.Fatal("the member did not rejoin")
		}
	}
	done := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		done <- src.Commit(cctx)
	}()
	// Long enough for a commit sent at once to come back refused.
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline) && src.Stats().CommitErrors == 0; {
		time.Sleep(5 * time.Millisecond)
	}
	open()
	if err := <-done; err != nil {
		t.Fatalf("Commit = %v", err)
	}
	if n := src.Stats().CommitErrors; n != 0 {
		t.Fatalf("%d commits refused while the member rejoined, want 0", n)
	}
	if got := commits(); len(got) == 0 || got[len(got)-1] != 100 {
		t.Fatalf("committed %v, want 100 at last", got)
	}
}

// joinAsAnotherMember starts a second member of group on topic "in",
// polling until ctx ends; the function it returns cancels ctx and closes
// that member.
func joinAsAnotherMember(t *testing.T, c *kfake.Cluster, group string, ctx context.Context, cancel context.CancelFunc) func() {
	t.Helper()
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("in"),
		kgo.Balancers(kgo.CooperativeStickyBalancer()))
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			other.PollFetches(ctx)
		}
	}()
	return func() { cancel(); <-polled; other.Close() }
}

// waitHundredSettled waits (10 s at most) until src has read the hundred
// records of its one partition and every one is settled.
func waitHundredSettled(t *testing.T, src *Source) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := src.Stats(); st.Records == 100 && len(st.Partitions) == 1 && st.Partitions[0].Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("records not consumed and settled")
		}
	}
}

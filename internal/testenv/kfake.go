package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kfake starts an in-process cluster of one broker with the given topics,
// each of `partitions` partitions, and returns its addresses. It is closed
// when the test ends.
func Kfake(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	return KfakeWith(t, kfake.SeedTopics(partitions, topics...))
}

// KfakeWith starts an in-process cluster with the given options.
func KfakeWith(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// KfakeCluster is an in-process cluster of one broker that a test can
// restart on the same address with its data (records, committed offsets,
// groups) kept on disk: an outage, not a loss.
type KfakeCluster struct {
	opts  []kfake.Opt
	dir   string
	addrs []string
	mu    sync.Mutex
	c     *kfake.Cluster
}

// StartKfake starts a KfakeCluster with opts, keeping its data in a
// temporary directory of the test. It is closed when the test ends.
func StartKfake(t testing.TB, opts ...kfake.Opt) *KfakeCluster {
	t.Helper()
	k := &KfakeCluster{opts: opts, dir: t.TempDir()}
	k.c = k.start(t, 0)
	k.addrs = k.c.ListenAddrs()
	t.Cleanup(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.c.Close()
	})
	return k
}

// Addrs returns the broker's address, the same across restarts.
func (k *KfakeCluster) Addrs() []string { return k.addrs }

// Restart closes the cluster, which drops every connection, and starts it
// again on the same port from the data it saved on closing. It returns
// when the broker listens again.
func (k *KfakeCluster) Restart(t testing.TB) {
	t.Helper()
	_, port, err := net.SplitHostPort(k.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.Close()
	k.c = k.start(t, p)
}

func (k *KfakeCluster) start(t testing.TB, port int) *kfake.Cluster {
	t.Helper()
	opts := append([]kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(k.dir)}, k.opts...)
	if port != 0 {
		opts = append(opts, kfake.Ports(port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	return c
}

// Produce writes n records to topic, spread over its partitions by key,
// with value(i) as the value and key "k<i>"; it fails the test on any
// error. It returns when every record is acknowledged.
func Produce(t testing.TB, brokers []string, topic string, n int, value func(i int) []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = ProduceAll(ctx, cl, n, func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: value(i)}
	})
	if err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// ProduceAll produces record(0) .. record(n-1) with cl, asynchronously,
// and returns when every one is acknowledged: nil, or the first error.
func ProduceAll(ctx context.Context, cl *kgo.Client, n int, record func(i int) *kgo.Record) error {
	errs := make(chan error, 1)
	for i := range n {
		cl.Produce(ctx, record(i), func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// CommittedOffsets asks the group coordinator for group's committed
// offsets of topic's partitions 0-63, by partition; nil if it did not
// answer within 2 s (callers poll again).
func CommittedOffsets(ctx context.Context, cl *kgo.Client, group, topic string) map[int32]int64 {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range int32(64) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil || kerr.ErrorForCode(resp.ErrorCode) != nil {
		return nil
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.ErrorCode == 0 && p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// EndOffsets returns the log end offset of each partition of topic; it
// fails the test if the cluster does not answer within 10 s.
func EndOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	ls.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends
}

// SetMaxMessageBytes sets topic's max.message.bytes, the largest record
// batch its partitions accept, on the cluster at brokers; it fails the test
// if the cluster does not apply it within 10 s.
func SetMaxMessageBytes(t testing.TB, brokers []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := strconv.Itoa(n)
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, topic)
	if err == nil {
		_, err = rs.On(topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("setting max.message.bytes of %s to %d: %v", topic, n, err)
	}
}

package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	errs := make(chan error, 1)
	for i := range n {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: value(i)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
	select {
	case err := <-errs:
		t.Fatalf("producing to %s: %v", topic, err)
	default:
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

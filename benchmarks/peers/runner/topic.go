package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// Workload is the topic every implementation consumes.
type Workload struct {
	Topic      string
	Partitions int32
	Records    int
	ValueSize  int // bytes
	Keys       int // distinct keys, k00000, k00001, ...
}

// produce creates w's topic on brokers, fills it and returns its end
// offset by partition. Values are random bytes, sent uncompressed, so that
// no implementation gains from a value that compresses to nothing.
func produce(ctx context.Context, brokers []string, w Workload) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxBufferedRecords(100_000),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	created, err := adm.CreateTopic(ctx, w.Partitions, 1, nil, w.Topic)
	if err == nil {
		err = created.Err
	}
	if err != nil {
		return nil, fmt.Errorf("creating topic %s: %w", w.Topic, err)
	}
	rng := rand.New(rand.NewPCG(18, 18))
	err = testenv.ProduceAll(ctx, cl, w.Records, func(i int) *kgo.Record {
		v := make([]byte, w.ValueSize)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		return &kgo.Record{Topic: w.Topic, Key: fmt.Appendf(nil, "k%05d", i%w.Keys), Value: v}
	})
	if err != nil {
		return nil, fmt.Errorf("producing to %s: %w", w.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, w.Topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	var total int64
	for _, n := range out {
		total += n
	}
	if len(out) != int(w.Partitions) || total != int64(w.Records) {
		return nil, fmt.Errorf("topic %s holds %d records in %d partitions, want %d in %d", w.Topic, total, len(out), w.Records, w.Partitions)
	}
	return out, nil
}

// committed returns group's committed offsets of topic by partition.
func committed(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

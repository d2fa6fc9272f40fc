package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// readTimeout bounds reading a dead-letter topic to its end.
const readTimeout = 30 * time.Second

// reasons reads a dead-letter topic: record key (the request id) ->
// reason. It reads every partition up to the end the topic had when the
// read began (Reader.ReadToEnd), not until the broker has been silent for
// a while: a slow first fetch (a loaded machine, a remote cluster) must
// not read as an empty topic, which would report every dead-lettered
// request lost. Not reaching the end within readTimeout is an error. The
// marks of `sluice deadletters replay` are not dead letters.
func reasons(rd Reader, topic string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	out := map[string]string{}
	err := rd.ReadToEnd(ctx, topic, time.Time{}, func(r *kgo.Record) bool {
		d := kafkasink.ReadDeadLetter(r)
		if d.ReplayOf == "" {
			out[string(r.Key)] = d.Reason
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// refusedFor reads the scheduler's compensation events (topic): the
// requests that at least one of them says a service refused for good
// (delivery.HeaderCause). An event of an earlier scheduler, without the
// header, says nothing.
func refusedFor(rd Reader, topic string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	out := map[string]bool{}
	err := rd.ReadToEnd(ctx, topic, time.Time{}, func(r *kgo.Record) bool {
		if !slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool {
			return h.Key == delivery.HeaderCause && string(h.Value) == delivery.CauseRefused
		}) {
			return true
		}
		id := string(r.Key)
		if c, err := delivery.DecodeEvent(r); err == nil && c.Progress.Request.ID != "" {
			id = c.Progress.Request.ID
		}
		out[id] = true
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeadLettersWritten returns how many records the scheduler's dead-letter
// topic holds, counting from its first record ever (Reader.Written: on
// Kafka the sum of its partitions' end offsets): at least as many as one
// run wrote, which is what Accounted's dead needs, at the cost of two
// small requests. It reads the Kafka brokers, or the Reader of ReadFrom.
func DeadLettersWritten(ctx context.Context, brokers []string, opts ...VerifyOption) (int, error) {
	c := verifyOptions(brokers, opts)
	return c.reader.Written(ctx, c.deadLetters)
}

// span is a partition's first offset and the offset after its last
// record.
type span struct{ start, end int64 }

// offsetBounds returns the span of every partition of topic.
func offsetBounds(ctx context.Context, cl *kgo.Client, topic string) (map[int32]span, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics in the answer", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	out := map[int32]span{}
	// -2 asks for the first offset, -1 for the end: two requests, since
	// one may not name a partition twice.
	for _, ts := range []int64{-2, -1} {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range mresp.Topics[0].Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p.Partition, ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("offsets of %s: %w", topic, err)
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("offsets of %s partition %d: %w", topic, p.Partition, err)
				}
				s := out[p.Partition]
				if ts == -2 {
					s.start = p.Offset
				} else {
					s.end = p.Offset
				}
				out[p.Partition] = s
			}
		}
	}
	return out, nil
}

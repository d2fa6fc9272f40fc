package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// parkedAtMost is the largest record each worker parks on its retry
// topic: a request, or a compensation, too large to park as it came is
// parked re-encoded, up to this.
var parkedAtMost = map[string]int{"delivery": delivery.MaxParkedRecord, "supervisor": supervisor.MaxParkedRecord}

// defaultBatchMax is franz-go's record batch limit
// (kgo.ProducerBatchMaxBytes), for a topic whose own limit is unknown.
const defaultBatchMax = 1_000_012

// topicLimits sizes the worker's record batches to the topics it writes: a
// topic refuses a batch larger than its max.message.bytes whole, and its
// records would then go one at a time (see package sink/kafka).
type topicLimits struct {
	limits atomic.Pointer[map[string]int32]
}

// batchMax is the producer's kgo.ProducerBatchMaxBytesFn: the topic's
// max.message.bytes once check read it, franz-go's default before. The
// client asks when it first produces to a partition, which is after
// check: the pipeline runs only then.
func (l *topicLimits) batchMax(topic string) int32 {
	if m := l.limits.Load(); m != nil {
		if n, ok := (*m)[topic]; ok {
			return min(max(n, 512), 1<<30) // the range franz-go accepts
		}
	}
	return defaultBatchMax
}

// check reads the max.message.bytes of the topics the worker writes
// (its retry topic among them), sizes its batches to them, and refuses a
// retry topic that cannot hold the largest record the worker parks: a
// worker started with it would stop at the first such record, and again
// at every restart.
func (l *topicLimits) check(ctx context.Context, cl *kgo.Client, which, retryTopic, failuresTopic string, outputs []string) error {
	limits, err := kafkasink.MaxMessageBytes(ctx, cl, append([]string{retryTopic}, outputs...)...)
	if err != nil {
		return err
	}
	if need := parkedAtMost[which]; int(limits[retryTopic]) < need {
		return fmt.Errorf("retry topic %q (-retry-topic) has max.message.bytes %d: the %s worker needs at least %d there, "+
			"to park whatever it parks (what is too large to park as it came is re-encoded, up to that size); "+
			"raise the topic's max.message.bytes", retryTopic, limits[retryTopic], which, need)
	}
	if limit, ok := limits[failuresTopic]; which == "delivery" && ok && int(limit) < delivery.MaxEventRecord {
		return fmt.Errorf("failures topic %q (-failures-topic) has max.message.bytes %d: the delivery worker needs at least %d there, "+
			"to write the compensation event of any request it accepts (what is larger is re-encoded, up to that size); "+
			"raise the topic's max.message.bytes", failuresTopic, limit, delivery.MaxEventRecord)
	}
	l.limits.Store(&limits)
	return nil
}

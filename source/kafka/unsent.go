package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Unsent asks the broker where each partition of topic ends now and
// returns, for each partition of it this source reads, how many of its
// records the source has not yet sent downstream: waiting at the broker,
// in the client's buffers, or fetched and held by the source while the
// pipeline has no room. 0 means every record the partition held when the
// broker answered has been sent.
//
// PartitionStats.Unread is as of the last fetch that brought records of
// the partition: it misses what the source holds, and it is stale while
// the partition is paused or the source waits for room downstream. A
// caller deciding that a partition is idle (flow.Tumbling's IdleWhen)
// needs Unsent: a partition whose records are queued behind other
// partitions' is quiet only for the pipeline, not at the broker. Sent is
// not received: records sent may still wait in the pipes before the
// caller's stage; compare PartitionStats.Unsettled with what the stage
// holds (flow.IdleWhenHeld), asked after Unsent.
//
// A partition is left out until its position is known: one assigned by a
// consumer group, or started by Assigned.Start at the configured start
// (offset -1), before its first record, whose start franz-go looks up.
// Records the source never sends count as unsent, so the partition never
// reads 0 until more records come: the commit or abort marker a
// transactional producer leaves at the log's end, and records past the
// last stable offset when the client reads committed records only.
// Partitions the broker could not answer for are left out too, and named
// in the error.
func (s *Source) Unsent(ctx context.Context, topic string) (map[int32]int64, error) {
	ends, err := kadm.NewClient(s.cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("sluice: kafka: the end offsets of %s: %w", topic, err)
	}
	// Positions are read after the broker answered: a record that existed
	// then and has not been sent since is counted.
	s.mu.Lock()
	parts := make([]*partition, 0, len(s.parts))
	for k, p := range s.parts {
		if k.topic == topic {
			parts = append(parts, p)
		}
	}
	s.mu.Unlock()
	unsent := make(map[int32]int64, len(parts))
	var errs []error
	for _, p := range parts {
		sent := p.sent.Load()
		if sent < 0 {
			continue
		}
		o, ok := ends.Lookup(topic, p.partition)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("sluice: kafka: no end offset for %s/%d", topic, p.partition))
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("sluice: kafka: the end offset of %s/%d: %w", topic, p.partition, o.Err))
		default:
			unsent[p.partition] = max(0, o.Offset-sent)
		}
	}
	return unsent, errors.Join(errs...)
}

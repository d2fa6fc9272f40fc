package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadToEnd reads every partition of topic, without a consumer group,
// from its first record (or, with since set, its first record written at
// or after since) up to the end the broker reported when the read began,
// calling each for every record in partition order. It does not stop when
// the broker is silent for a while: a slow first fetch must not read as an
// empty topic. It stops early, with no error, when each returns false;
// ctx bounds it. opts reach the cluster (Conn.ClientOpts).
func ReadToEnd(ctx context.Context, opts []kgo.Opt, topic string, since time.Time, each func(*kgo.Record) bool) error {
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admin)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	var starts kadm.ListedOffsets
	if err == nil {
		if since.IsZero() {
			starts, err = adm.ListStartOffsets(ctx, topic)
		} else {
			starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
		}
		if err == nil {
			err = starts.Error()
		}
	}
	admin.Close()
	if err != nil {
		return fmt.Errorf("sluice: kafka: the offsets of %s: %w%s", topic, err, saslHint(err))
	}
	if _, ok := ends[topic]; !ok {
		return fmt.Errorf("%w %q", ErrUnknownTopic, topic)
	}
	end := map[int32]int64{}
	toRead := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, o.Partition)
		if ok && s.Offset >= 0 && s.Offset < o.Offset { // after since: -1 or the end when nothing is that new
			end[o.Partition] = o.Offset
			toRead[o.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	if len(toRead) == 0 {
		return nil
	}
	// Control records (a transaction's commit marker) take offsets too: a
	// partition that ends with one is read to its end only if they are
	// seen; they are not passed to each.
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: toRead}),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.KeepControlRecords())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(toRead) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sluice: kafka: reading %s: %d partitions not read to their end: %w", topic, len(toRead), err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = errors.Join(ferr, fmt.Errorf("sluice: kafka: reading %s partition %d: %w", topic, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		stop := false
		fs.EachRecord(func(r *kgo.Record) {
			if stop || r.Offset >= end[r.Partition] {
				return
			}
			if !r.Attrs.IsControl() && !each(r) {
				stop = true
			}
			if r.Offset+1 >= end[r.Partition] {
				delete(toRead, r.Partition)
			}
		})
		if stop {
			return nil
		}
	}
	return nil
}

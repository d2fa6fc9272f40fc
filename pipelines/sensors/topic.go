package sensors

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readTopic calls fn for every record of topic from its start to the end
// it has when the call begins. cl must not consume anything else.
func readTopic(ctx context.Context, cl *kgo.Client, topic string, fn func(*kgo.Record)) error {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing the end of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("listing the end of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	offs := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			offs[topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl.AddConsumePartitions(offs)
	defer cl.RemoveConsumePartitions(map[string][]int32{topic: keys(want)})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %w (%d partitions not read to their end)", topic, err, len(want))
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("reading %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			fn(r)
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return nil
}

func keys(m map[int32]int64) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

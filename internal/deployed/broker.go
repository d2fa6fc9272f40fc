package deployed

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Lag is the scheduler group's lag on the requests topic: records
// produced and not yet committed.
func (s *System) Lag(ctx context.Context) (int64, error) {
	if s.OnRedis() {
		return s.streamLag(ctx, RequestsTopic, Group)
	}
	return s.lag(ctx, RequestsTopic, Group)
}

// LagAll is the lag of every group of both workers (the scheduler's, the
// supervisor's and their replay groups) on every topic they read: zero
// once every record produced so far, parked ones and compensations
// included, has been processed and committed.
func (s *System) LagAll(ctx context.Context) (int64, error) {
	if s.OnRedis() {
		var sum int64
		for _, r := range groupReads {
			n, err := s.streamLag(ctx, r.topic, r.group)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	}
	groups := make([]string, len(groupReads))
	for i, r := range groupReads {
		groups[i] = r.group
	}
	return s.lag(ctx, "", groups...)
}

// lag sums the lag of groups on topic ("": every topic).
func (s *System) lag(ctx context.Context, topic string, groups ...string) (int64, error) {
	lags, err := s.adm.Lag(ctx, groups...)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, g := range groups {
		l, ok := lags[g]
		if !ok {
			return 0, errors.New("no lag for " + g)
		}
		if l.Error() != nil {
			return 0, fmt.Errorf("lag of %s: %w", g, l.Error())
		}
		for _, ps := range l.Lag {
			for _, p := range ps {
				if (topic == "" || p.Topic == topic) && p.Lag > 0 {
					sum += p.Lag
				}
			}
		}
	}
	return sum, nil
}

// Produce writes records to the broker (e.g. a request again, as a
// client's retry would).
func (s *System) Produce(ctx context.Context, recs ...*kgo.Record) error {
	if s.OnRedis() {
		return s.appendEntries(ctx, recs)
	}
	return s.kcl.ProduceSync(ctx, recs...).FirstErr()
}

// Requests reads the requests topic from its start up to its end.
func (s *System) Requests(ctx context.Context) ([]*kgo.Record, error) {
	if s.OnRedis() {
		return s.readStream(ctx, RequestsTopic)
	}
	ends, err := s.adm.ListEndOffsets(ctx, RequestsTopic)
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers), kgo.ConsumeTopics(RequestsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

package deployed

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/stream"
)

// streamLag is a group's lag on a Redis stream: the entries not yet
// delivered to the group, and those delivered and not acknowledged yet
// (pending) — zero once every entry is processed. A stream or group not
// there yet has none.
func (s *System) streamLag(ctx context.Context, topic, group string) (int64, error) {
	groups, err := s.rc.XInfoGroups(ctx, topic).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return 0, nil
		}
		return 0, fmt.Errorf("groups of stream %s: %w", topic, err)
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		lag := g.Lag
		if lag < 0 { // the server cannot tell (entries deleted): count what follows the last delivered
			n, err := s.rc.XRange(ctx, topic, "("+g.LastDeliveredID, "+").Result()
			if err != nil {
				return 0, fmt.Errorf("stream %s: %w", topic, err)
			}
			lag = int64(len(n))
		}
		return lag + g.Pending, nil
	}
	return 0, nil
}

// appendEntries appends each record to the stream of its topic, laid out
// as the workers read it.
func (s *System) appendEntries(ctx context.Context, recs []*kgo.Record) error {
	pipe := s.rc.Pipeline()
	for _, r := range recs {
		hs := make([]stream.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = stream.Header{Key: h.Key, Value: h.Value}
		}
		pipe.Do(ctx, redisentry.AppendFields([]any{"XADD", r.Topic, "*"}, "", r.Key, r.Value, hs)...)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// readStream reads a stream from its first entry to its last, each entry
// as a record.
func (s *System) readStream(ctx context.Context, topic string) ([]*kgo.Record, error) {
	var out []*kgo.Record
	start := "-"
	for {
		reply, err := s.rc.Do(ctx, "XRANGE", topic, start, "+", "COUNT", 1000).Slice()
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", topic, err)
		}
		for _, e := range reply {
			r, id, err := entryRecord(topic, e)
			if err != nil {
				return nil, fmt.Errorf("reading stream %s: %w", topic, err)
			}
			out = append(out, r)
			start = "(" + id
		}
		if len(reply) < 1000 {
			return out, nil
		}
	}
}

// entryRecord is an entry of an XRANGE reply, [id, [field, value, ...]].
func entryRecord(topic string, e any) (*kgo.Record, string, error) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return nil, "", errors.New("an entry is not [id, fields]")
	}
	id, _ := pair[0].(string)
	raw, _ := pair[1].([]any)
	fields := make([]string, len(raw))
	for i, f := range raw {
		if fields[i], ok = f.(string); !ok {
			return nil, "", fmt.Errorf("entry %s: field %d is %T", id, i, f)
		}
	}
	d, err := redisentry.Decode("", fields)
	if err != nil {
		return nil, "", fmt.Errorf("entry %s: %w", id, err)
	}
	off, err := redisentry.Offset(id)
	if err != nil {
		return nil, "", err
	}
	r := &kgo.Record{Topic: topic, Key: d.Key, Value: d.Value, Offset: off}
	for _, h := range d.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return r, id, nil
}

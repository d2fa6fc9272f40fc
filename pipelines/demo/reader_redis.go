package demo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/source/redisstream"
)

// readPage is how many entries one XRANGE of RedisReader asks for.
const readPage = 1000

// RedisReader reads the Redis streams named like the topics, on the
// server client reaches. A stream that does not exist reads as empty: on
// Redis a stream comes to be with its first entry.
func RedisReader(client redis.UniversalClient) Reader { return redisReader{client} }

type redisReader struct{ rc redis.UniversalClient }

// ReadToEnd reads the stream with XRANGE, a page at a time, up to its
// last entry when the read began; each entry's fields are decoded in
// their order (redisentry.Decode), so headers come back in order, repeats
// kept.
func (r redisReader) ReadToEnd(ctx context.Context, topic string, since time.Time, each func(*kgo.Record) bool) error {
	last, err := r.lastID(ctx, topic)
	if err != nil || last == "" {
		return err
	}
	start := "-"
	if !since.IsZero() {
		start = strconv.FormatInt(max(since.UnixMilli(), 0), 10)
	}
	for {
		reply, err := r.rc.Do(ctx, "XRANGE", topic, start, last, "COUNT", readPage).Slice()
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", topic, err)
		}
		for _, e := range reply {
			rec, id, err := entryRecord(topic, e)
			if err != nil {
				return fmt.Errorf("reading stream %s: %w", topic, err)
			}
			if !each(rec) {
				return nil
			}
			start = "(" + id
		}
		if len(reply) < readPage {
			return nil
		}
	}
}

// lastID is the ID of the stream's last entry, "" if it has none.
func (r redisReader) lastID(ctx context.Context, topic string) (string, error) {
	reply, err := r.rc.Do(ctx, "XREVRANGE", topic, "+", "-", "COUNT", 1).Slice()
	if err != nil {
		return "", fmt.Errorf("reading stream %s: %w", topic, err)
	}
	if len(reply) == 0 {
		return "", nil
	}
	_, id, err := entryRecord(topic, reply[0])
	if err != nil {
		return "", fmt.Errorf("reading stream %s: %w", topic, err)
	}
	return id, nil
}

// entryRecord is an entry of an XRANGE reply, [id, [field, value, ...]],
// as a record of topic.
func entryRecord(topic string, e any) (*kgo.Record, string, error) {
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return nil, "", fmt.Errorf("an entry of the reply is %T, want [id, fields]", e)
	}
	id, ok := pair[0].(string)
	if !ok {
		return nil, "", fmt.Errorf("an entry's ID is %T, want a string", pair[0])
	}
	raw, ok := pair[1].([]any)
	if !ok {
		return nil, "", fmt.Errorf("entry %s: its fields are %T, want a list", id, pair[1])
	}
	fields := make([]string, len(raw))
	for i, f := range raw {
		if fields[i], ok = f.(string); !ok {
			return nil, "", fmt.Errorf("entry %s: field %d is %T, want a string", id, i, f)
		}
	}
	d, err := redisstream.Decode("", fields)
	if err != nil {
		return nil, "", fmt.Errorf("entry %s: %w", id, err)
	}
	off, err := redisstream.Offset(id)
	if err != nil {
		return nil, "", err
	}
	rec := &kgo.Record{Topic: topic, Key: d.Key, Value: d.Value, Offset: off,
		Timestamp: redisstream.EntryTime(off)}
	for _, h := range d.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return rec, id, nil
}

// Written is the stream's entries-added (XINFO STREAM, Redis 7), or its
// length where the server does not count them; 0 for no stream.
func (r redisReader) Written(ctx context.Context, topic string) (int, error) {
	info, err := r.rc.XInfoStream(ctx, topic).Result()
	switch {
	case err != nil && strings.Contains(err.Error(), "no such key"):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("stream %s: %w", topic, err)
	case info.EntriesAdded > 0:
		return int(info.EntriesAdded), nil
	}
	return int(info.Length), nil
}

func (redisReader) Position(r *kgo.Record) string { return redisstream.EntryID(r.Offset) }

package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/source/kafka"
)

// Reader reads the records of a transport's topics back, for a
// verification and for `sluice deadletters`: Kafka topics (KafkaReader) or
// the Redis streams of the same names (RedisReader).
type Reader interface {
	// ReadToEnd calls each with every record of topic written at or after
	// since (zero: from its first), up to the end the topic had when the
	// read began, in order within each partition; each returning false
	// stops it early, with no error. A record comes with its key, value,
	// headers in order, topic, partition, offset and time; on Redis the
	// partition is 0 and the offset the entry ID's (redisstream.Offset).
	ReadToEnd(ctx context.Context, topic string, since time.Time, each func(*kgo.Record) bool) error
	// Written returns how many records topic has held since it was
	// created, those removed since included: at least as many as a run
	// wrote to it.
	Written(ctx context.Context, topic string) (int, error)
	// Position is where r is in its topic as its user names it:
	// "<partition>/<offset>" on Kafka, the entry ID on Redis.
	Position(r *kgo.Record) string
}

// KafkaReader reads Kafka topics on the cluster of brokers; opts are the
// connection's others (TLS, SASL: kafka.Conn.ClientOpts).
func KafkaReader(brokers []string, opts ...kgo.Opt) Reader {
	return kafkaReader{opts: append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)}
}

type kafkaReader struct{ opts []kgo.Opt }

// ReadToEnd is kafka.ReadToEnd: every partition to the end the broker
// reported when the read began, not until the broker has been silent for
// a while (a slow first fetch must not read as an empty topic).
func (k kafkaReader) ReadToEnd(ctx context.Context, topic string, since time.Time, each func(*kgo.Record) bool) error {
	return kafka.ReadToEnd(ctx, k.opts, topic, since, each)
}

// Written is the sum of the partitions' end offsets.
func (k kafkaReader) Written(ctx context.Context, topic string) (int, error) {
	cl, err := kgo.NewClient(k.opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	bounds, err := offsetBounds(ctx, cl, topic)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bounds {
		n += int(b.end)
	}
	return n, nil
}

func (kafkaReader) Position(r *kgo.Record) string { return fmt.Sprintf("%d/%d", r.Partition, r.Offset) }

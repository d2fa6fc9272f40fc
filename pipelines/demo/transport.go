package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// The transports a demo runs on (Config.Transport).
const (
	// TransportKafka puts the topics on Kafka: Config.Brokers, or an
	// embedded broker (kfake).
	TransportKafka = "kafka"
	// TransportRedis puts them on the Redis streams of the same names, on
	// the server of Config.Redis (an embedded one, miniredis, by default),
	// read in consumer groups.
	TransportRedis = "redis"
)

// transport is where a run's topics live, and how its parts reach them.
type transport struct {
	name    string   // TransportKafka or TransportRedis
	brokers []string // Kafka's; nil on Redis
	// producer writes the load and the workers' records.
	producer kafkasink.Producer
	// open opens a source that reads topic in group, for the life-th
	// incarnation of the workers (from 1).
	open func(ctx context.Context, group, topic string, life int) (input, error)
	// verify reads the topics back for the verification.
	verify []VerifyOption
}

// input is a source of an incarnation: it reads its topic in a consumer
// group and commits what is settled (a *kafka.Source, or a Redis
// stream's source, embedded: the pipelines see its own methods).
type input interface {
	stream.Source[[]byte]
	stream.Committer
	Ready(ctx context.Context) error
	// behind is how many records of its topic the group has not read
	// yet; records how many this source has read.
	behind() int64
	records() int64
	// stop ends what the source holds open once its pipeline ended.
	stop()
}

// kafkaInput is a Kafka topic's source.
type kafkaInput struct{ *kafka.Source }

func (k kafkaInput) behind() int64 {
	var n int64
	for _, p := range k.Stats().Partitions {
		n += p.Lag
	}
	return n
}

func (k kafkaInput) records() int64 { return k.Stats().Records }
func (k kafkaInput) stop()          { k.Close(context.Background()) }

// startTransport starts what the run's topics live on and returns how to
// reach it.
func startTransport(ctx context.Context, cfg *Config, w io.Writer, cl *cleanups) (*transport, error) {
	if cfg.Transport == TransportRedis {
		return startStreams(ctx, cfg, w, cl)
	}
	brokers, err := startBroker(ctx, *cfg, cl)
	if err != nil {
		return nil, err
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return nil, err
	}
	cl.add(producer.Close)
	open := func(ctx context.Context, group, topic string, _ int) (input, error) {
		s, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: group,
			Topics: []string{topic}, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		return kafkaInput{s}, nil
	}
	return &transport{name: TransportKafka, brokers: brokers, producer: producer, open: open}, nil
}

// startBroker returns the brokers to run against: the configured cluster,
// its topics created if missing, or an embedded one with the topics seeded.
func startBroker(ctx context.Context, cfg Config, cl *cleanups) ([]string, error) {
	if len(cfg.Brokers) > 0 {
		topics := map[string]int32{topicFailures: 4, topicDead: 1, topicParked: 4, topicRetry: 4, topicSupervisorDead: 1}
		for _, t := range topicLevels {
			topics[t] = cfg.Partitions
		}
		return cfg.Brokers, createTopics(ctx, cfg.Brokers, topics)
	}
	// Each level's topic has the partitions of the requests: each can take
	// the whole load.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, topicLevels[:]...),
		kfake.SeedTopics(4, topicFailures), kfake.SeedTopics(1, topicDead), kfake.SeedTopics(4, topicParked),
		kfake.SeedTopics(4, topicRetry), kfake.SeedTopics(1, topicSupervisorDead))
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	cl.add(cluster.Close)
	return cluster.ListenAddrs(), nil
}

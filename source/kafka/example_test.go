package kafka_test

import (
	"context"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// The at-least-once pipeline of seed 002: consume, call a service
// concurrently, checkpoint; failures go to a dead-letter topic. (Not run:
// it needs a broker.)
func ExampleNewSource() {
	ctx := context.Background()
	cfg := kafka.Config{
		Conn:   kafka.Conn{Brokers: []string{"127.0.0.1:9092"}},
		Group:  "deliveries",
		Topics: []string{"delivery-requests"},
	}
	src, err := kafka.NewSource(ctx, cfg)
	if err != nil {
		log.Fatal(err) // names what is wrong: config, unreachable broker, unknown topic
	}
	producer, err := kgo.NewClient(cfg.ClientOpts()...)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()

	g := stream.New()
	reqs := stream.From(g, stream.Source[[]byte](src))
	done := stream.Via(reqs, stream.Flow[[]byte, []byte](flow.MapAsync(256, func(ctx context.Context, req []byte) ([]byte, error) {
		return req, nil // call the backend here
	}, flow.CallTimeout(2*time.Second))))
	stream.To(done, stream.Sink[[]byte](checkpoint.New[[]byte](src)))
	stream.To(g.Failures(), stream.Sink[stream.Failure](kafkasink.NewDeadLetter(producer, "delivery-failures")))
	if err := g.Run(ctx); err != nil {
		log.Print(err)
	}
	if err := src.Close(ctx); err != nil { // final commit, leave the group
		log.Print(err)
	}
}

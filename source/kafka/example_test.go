package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// An at-least-once pipeline: consume, call a service
// concurrently, checkpoint; failures go to a dead-letter topic. kfake,
// franz-go's in-process broker, stands in for the cluster here.
func ExampleNewSource() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "delivery-requests", "delivery-failures"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	cfg := kafka.Config{
		Conn:   kafka.Conn{Brokers: cluster.ListenAddrs()},
		Group:  "deliveries",
		Topics: []string{"delivery-requests"},
	}
	producer, err := kgo.NewClient(cfg.ClientOpts()...)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	for _, req := range []string{"drone-1", "", "drone-3"} {
		if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "delivery-requests", Value: []byte(req)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	src, err := kafka.NewSource(ctx, cfg)
	if err != nil {
		log.Fatal(err) // names what is wrong: config, unreachable broker, unknown topic
	}
	g := stream.New()
	reqs := stream.From(g, src)
	done := stream.Via(reqs, flow.MapAsync(256, func(ctx context.Context, req []byte) ([]byte, error) {
		if len(req) == 0 {
			return nil, errors.New("empty request")
		}
		return req, nil // call the backend here
	}, flow.CallTimeout(2*time.Second)))
	stream.To(done, checkpoint.New[[]byte](src, checkpoint.Interval(10*time.Millisecond)))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(producer, "delivery-failures"))

	// A worker runs until it is told to stop; this one stops once the
	// three requests are committed.
	runCtx, stop := context.WithCancel(ctx)
	committed := make(chan int64, 1)
	go func() {
		defer stop()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st := src.Stats(); len(st.Partitions) == 1 && st.Partitions[0].Committed == 3 {
				committed <- st.Partitions[0].Committed
				return
			}
		}
		committed <- -1
	}()
	if err := g.Run(runCtx); err != nil {
		log.Print(err)
	}
	if err := src.Close(ctx); err != nil { // final commit, leave the group
		log.Print(err)
	}
	fmt.Println("records:", src.Stats().Records, "committed up to:", <-committed)
	// Output: records: 3 committed up to: 3
}

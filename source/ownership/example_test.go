package ownership_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

// One instance of an application that reads a topic's partitions by
// direct assignment, owning them through records in Redis and
// checkpointing there. Run several with different IDs and they share the
// partitions. kfake and miniredis stand in for Kafka and Redis here.
func ExampleNewBalancer() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "readings"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	conn := kafka.Conn{Brokers: cluster.ListenAddrs()}
	producer, err := kgo.NewClient(conn.ClientOpts()...)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	for i := range 100 {
		r := &kgo.Record{Topic: "readings", Key: fmt.Appendf(nil, "home-%d", i%10), Value: fmt.Appendf(nil, "%d", i)}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	src, err := kafka.NewAssigned(ctx, kafka.AssignedConfig{Conn: conn, Topic: "readings"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "example", Stream: "readings", Group: "sensors",
		Expiration: 5 * time.Second}) // production: a minute, with a 10 s interval
	if err != nil {
		log.Fatal(err)
	}
	bal, err := ownership.NewBalancer[[]byte](store, src, ownership.Config{ID: "instance-1", Interval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err) // names what is wrong: a missing ID, an expiration below 3 x the interval...
	}
	runCtx, stop := context.WithCancel(ctx)
	g := stream.New()
	n := 0
	out := stream.Via(stream.From(g, stream.Source[[]byte](bal)), flow.Map(func(v []byte) ([]byte, error) {
		if n++; n == 100 {
			stop() // a worker runs until told to stop; this one once it has seen every reading
		}
		return v, nil
	}))
	stream.To(out, checkpoint.New[[]byte](bal))
	if err := g.Run(runCtx); err != nil {
		log.Print(err)
	}
	if err := bal.Close(ctx); err != nil { // final checkpoint, relinquish
		log.Print(err)
	}
	cks, err := store.Checkpoints(ctx, []int32{0, 1, 2, 3})
	if err != nil {
		log.Fatal(err)
	}
	total := int64(0)
	for _, ck := range cks {
		total += ck.Offset
	}
	fmt.Println("readings:", n, "checkpointed:", total)
	// Output: readings: 100 checkpointed: 100
}

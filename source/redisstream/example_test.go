package redisstream_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// Read a stream as a member of a consumer group, process each entry, and
// end in a checkpoint sink, whose commits wait for the acknowledgements.
// miniredis, an in-process Redis, stands in for the server here.
func ExampleNew() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		// Any producer can write one: XADD orders * value order-1
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{"value", order}}).Err(); err != nil {
			log.Fatal(err)
		}
	}

	src, err := redisstream.New(ctx, redisstream.Config{
		Client:   rdb,
		Streams:  []string{"orders"},
		Group:    "billing",
		Consumer: "worker-1", // the same name again after a restart
		Create:   true,       // XGROUP CREATE orders billing 0 MKSTREAM
	})
	if err != nil {
		log.Fatal(err) // names what is wrong: a field, an unreachable address, a missing group
	}
	billed := 0
	g := stream.New()
	orders := stream.From(g, src)
	done := stream.Via(orders, flow.Map(func(order []byte) ([]byte, error) {
		fmt.Println("billing", string(order))
		if billed++; billed == 3 {
			cancel() // a worker runs until it is stopped; this example stops after three
		}
		return order, nil
	}))
	stream.To(done, checkpoint.New[[]byte](src))
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		log.Fatal(err)
	}
	pending, err := rdb.XPending(context.Background(), "orders", "billing").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("entries pending:", pending.Count)
	// Output:
	// billing order-1
	// billing order-2
	// billing order-3
	// entries pending: 0
}

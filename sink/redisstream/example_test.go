package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// The examples run against miniredis, an in-process Redis, where a program
// would give its server's address.

// printStream prints each entry's fields, in order.
func printStream(c *redis.Client, name string) {
	v, err := c.Do(context.Background(), "xrange", name, "-", "+").Slice()
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range v {
		fmt.Println(e.([]any)[1])
	}
}

// NewSink appends each message to a stream and settles it once Redis has
// answered.
func ExampleNewSink() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()

	tr := stream.NewTracker(0)
	g := stream.New()
	words := stream.From(g, source.Slice([][]byte{[]byte("hello"), []byte("world")}, source.Track(tr)))
	stream.To(words, redisstream.NewSink(c, "greetings", redisstream.Values, redisstream.MaxLen(10_000)))
	if err = g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written and settled:", tr.Stats().Settled[stream.Completed])
	printStream(c, "greetings")
	// Output:
	// written and settled: 2
	// [value hello]
	// [value world]
}

// A Producer lets a Kafka dead letter write a pipeline's failures to a
// Redis stream: the failed value, the reason and the stage in headers.
func ExampleNewProducer() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	p := redisstream.NewProducer(c)
	defer p.Close()

	g := stream.New()
	in := stream.From(g, source.Slice([][]byte{[]byte("42"), []byte("forty-two")}))
	stream.To(in, sink.Func(func(_ context.Context, v []byte) error {
		if v[0] < '0' || v[0] > '9' {
			return errors.New("not a number")
		}
		return nil
	}), stream.Name("parse"))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(p, "dead-letters"))
	if err = g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	v, err := c.Do(context.Background(), "xrange", "dead-letters", "-", "+").Slice()
	if err != nil {
		log.Fatal(err)
	}
	fs := v[0].([]any)[1].([]any)
	fmt.Println(fs[:6]...)
	// Output:
	// value forty-two h:sluice-stage parse h:sluice-reason not a number
}

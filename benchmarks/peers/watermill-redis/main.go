// Command watermill-redis is the Watermill peer of BenchmarkRedisStreams
// (benchmarks/redisstream_test.go): watermill-redisstream's subscriber
// reading a stream in a consumer group, each message acked at once, as a
// handler that does nothing would.
//
// It reads the entries the benchmark wrote (a field "value" of 200 bytes)
// through an Unmarshaller of that field, since Watermill's own expects the
// fields its publisher writes. It prints "subscribed" once Subscribe
// returned and "consumed <n>" once it has acked n messages; the benchmark
// measures until the group's pending list is empty (the subscriber sends
// each XACK after the Ack), reads this process's CPU time, and ends it
// with SIGTERM.
//
// What limits it: the subscriber reads with XREADGROUP COUNT 1 and sends
// one XACK per message, each a round trip of its own, and hands a message
// on only once the previous one was acked.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// valueField reads an entry's "value" field as the message's payload.
type valueField struct{}

func (valueField) Unmarshal(values map[string]any) (*message.Message, error) {
	v, ok := values["value"].(string)
	if !ok {
		return nil, errors.New("the entry has no field \"value\"")
	}
	return message.NewMessage(watermill.NewShortUUID(), []byte(v)), nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis-server address")
	streamName := flag.String("stream", "bench", "stream to read")
	group := flag.String("group", "watermill", "consumer group")
	n := flag.Int("n", 1_000_000, "messages to consume")
	flag.Parse()
	if err := run(*addr, *streamName, *group, *n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(addr, streamName, group string, n int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: rc, Unmarshaller: valueField{}, Consumer: "watermill-1", ConsumerGroup: group,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, streamName)
	if err != nil {
		return err
	}
	fmt.Println("subscribed")
	var bytes int
	for i := 0; i < n; i++ {
		select {
		case m := <-msgs:
			bytes += len(m.Payload)
			m.Ack()
		case <-ctx.Done():
			return fmt.Errorf("stopped after %d of %d messages", i, n)
		}
	}
	fmt.Println("consumed", n, "messages,", bytes, "bytes")
	<-ctx.Done()
	return nil
}

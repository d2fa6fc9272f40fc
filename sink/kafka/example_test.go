package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// The examples run against kfake, franz-go's in-process broker, where a
// program would give its brokers' addresses.

// cluster starts a one-broker kfake cluster with the given topics of one
// partition each.
func cluster(topics ...string) *kfake.Cluster {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// producer is a client for the sinks; the caller closes it after Run.
func producer(c *kfake.Cluster) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		log.Fatal(err)
	}
	return cl
}

// readBack calls each for every record of topic, from its start.
func readBack(c *kfake.Cluster, topic string, each func(r *kgo.Record)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, topic, time.Time{},
		func(r *kgo.Record) bool { each(r); return true })
	if err != nil {
		log.Fatal(err)
	}
}

// NewSink writes each message as a record and settles it once the broker
// acknowledged it.
func ExampleNewSink() {
	c := cluster("greetings")
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	tr := stream.NewTracker(0)
	g := stream.New()
	words := stream.From(g, source.Slice([][]byte{[]byte("hello"), []byte("world")}, source.Track(tr)))
	stream.To(words, kafkasink.NewSink(cl, kafkasink.Records("greetings")))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("acknowledged and settled:", tr.Stats().Settled[stream.Completed])
	readBack(c, "greetings", func(r *kgo.Record) { fmt.Printf("%s\n", r.Value) })
	// Output:
	// acknowledged and settled: 2
	// hello
	// world
}

// NewDeadLetter records a pipeline's failures in a topic: the failed
// value as it came, the reason and the stage in headers.
func ExampleNewDeadLetter() {
	c := cluster("failures")
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	tr := stream.NewTracker(0)
	g := stream.New()
	orders := stream.From(g, source.Slice([]string{"order-1", "", "order-3"}, source.Track(tr)))
	stream.To(orders, sink.Func(func(_ context.Context, order string) error {
		if order == "" {
			return errors.New("empty order")
		}
		return nil
	}), stream.Name("store"))
	stream.To(g.Failures(), kafkasink.NewDeadLetter(cl, "failures"))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	st := tr.Stats()
	fmt.Println("completed:", st.Settled[stream.Completed], "dead-lettered:", st.Settled[stream.DeadLettered])
	readBack(c, "failures", func(r *kgo.Record) {
		d := kafkasink.ReadDeadLetter(r)
		fmt.Printf("value %q failed in %s: %s\n", r.Value, d.Stage, d.Reason)
	})
	// Output:
	// completed: 2 dead-lettered: 1
	// value "" failed in store: empty order
}

// Failures that stayed transient after their retries are parked, to be
// replayed later (a pipeline reading the parking topic through
// flow.Delay(kafkasink.ReplayAt)); the others go to the dead letters.
func ExampleNewParking() {
	c := cluster("retry-later", "failures")
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	call := func(_ context.Context, id string) (string, error) {
		if id == "busy" {
			return "", stream.Transient(errors.New("service unavailable"))
		}
		if id == "bad" {
			return "", errors.New("no such account")
		}
		return id, nil
	}
	twice := flow.RetryPolicy{Strategy: flow.Regular, Jitter: flow.NoJitter, MaxAttempts: 2, BaseDelay: time.Millisecond}
	tr := stream.NewTracker(0)
	g := stream.New()
	ids := stream.From(g, source.Slice([]string{"ok", "busy", "bad"}, source.Track(tr)))
	stream.To(stream.Via(ids, flow.MapAsync(1, call, flow.Retry(twice))), sink.Discard[string]())
	transient, permanent := stream.Split(g.Failures(), func(f stream.Failure) bool { return f.Transient })
	stream.To(transient, kafkasink.NewParking(cl, "retry-later", time.Minute))
	stream.To(permanent, kafkasink.NewDeadLetter(cl, "failures"))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	st := tr.Stats()
	fmt.Println("completed:", st.Settled[stream.Completed], "parked:", st.Settled[stream.Parked],
		"dead-lettered:", st.Settled[stream.DeadLettered])
	readBack(c, "retry-later", func(r *kgo.Record) {
		d := kafkasink.ReadDeadLetter(r)
		fmt.Printf("parked %s after %d attempts (%s), replay %v after it failed\n",
			r.Value, d.Attempts, d.Reason, replayAt(r).Sub(d.FailedAt).Round(time.Second))
	})
	// Output:
	// completed: 1 parked: 1 dead-lettered: 1
	// parked busy after 2 attempts (service unavailable), replay 1m0s after it failed
}

// NewParkingFunc picks each message's replay delay: Backoff doubles it
// with every parking the message had before.
func ExampleNewParkingFunc() {
	c := cluster("retry-later")
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	g := stream.New()
	stream.To(stream.From(g, source.Slice([]string{"busy"})), sink.Func(func(context.Context, string) error {
		return stream.Transient(errors.New("service unavailable"))
	}))
	stream.To(g.Failures(), kafkasink.NewParkingFunc(cl, "retry-later", kafkasink.Backoff("retry-later", time.Second, time.Hour)))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	readBack(c, "retry-later", func(r *kgo.Record) {
		d := kafkasink.ReadDeadLetter(r)
		fmt.Printf("parked %s (parking %d), replay %v after it failed\n", r.Value, d.Parkings, replayAt(r).Sub(d.FailedAt).Round(time.Second))
	})
	// Output: parked busy (parking 1), replay 1s after it failed
}

// replayAt is the replay time a parking wrote in r (HeaderReplayAt); a
// pipeline replaying the topic reads it with ReplayAt.
func replayAt(r *kgo.Record) time.Time {
	for _, h := range r.Headers {
		if h.Key == kafkasink.HeaderReplayAt {
			t, _ := time.Parse(time.RFC3339Nano, string(h.Value))
			return t
		}
	}
	return time.Time{}
}

// A parking writes a message too large for its topic in a compact form
// that its replay reads as the same work: here an order without the
// attachment its sender added, which the pipeline does not read.
func ExampleWithCompact() {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "retry-later"),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	type order struct {
		ID string `json:"id"`
	}
	compact := func(m *stream.Message[stream.Failure]) *kgo.Record {
		var o order
		if err := json.Unmarshal(m.Value.Value.([]byte), &o); err != nil {
			return nil // none: the pipeline stops, the message unsettled
		}
		b, _ := json.Marshal(o)
		return &kgo.Record{Key: m.Key, Value: b}
	}
	big := fmt.Appendf(nil, `{"id":"o-1","attachment":%q}`, noise(4096))
	g := stream.New()
	stream.To(stream.From(g, source.Slice([][]byte{big})), sink.Func(func(context.Context, []byte) error {
		return stream.Transient(errors.New("service unavailable"))
	}))
	stream.To(g.Failures(), kafkasink.NewParking(cl, "retry-later", time.Minute, kafkasink.WithCompact(compact)))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	readBack(c, "retry-later", func(r *kgo.Record) { fmt.Printf("parked %s\n", r.Value) })
	// Output: parked {"id":"o-1"}
}

package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// One client shared by two producers, as a process shares one between its
// pipelines, or between a stopping pipeline and the one replacing it
// (pipelines/demo's restarts). When the context of the other's record
// ends while the records of a partition wait in the client's buffer (here
// for a producer ID), franz-go fails every record buffered for that
// partition with context.Canceled, the sink's too. That is neither the
// record's fault nor the broker's: the sink produces it again instead of
// ending its pipeline. It ended it before ("producing to topic ...:
// context canceled"; seen once in make test-kafka's delivery test, whose
// restarts share one producer).
func TestSinkProducesAgainWhatAnotherUsersCancelFailed(t *testing.T) {
	// The broker takes 300 ms to hand out a producer ID: meanwhile both
	// records wait in the client's buffer for the partition.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(300 * time.Millisecond)
		return nil, nil, false
	})
	brokers := c.ListenAddrs()
	cl := client(t, brokers)

	other, cancelOther := context.WithCancel(context.Background())
	otherDone := make(chan error, 1)
	cl.Produce(other, &kgo.Record{Topic: "out", Value: []byte("other")}, func(_ *kgo.Record, err error) { otherDone <- err })

	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		return out.Send(ctx, stream.NewMessage([]byte("ours"), stream.Handle{}))
	})
	stream.To(stream.From(g, src), kafkasink.NewSink(cl, kafkasink.Records("out")))
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for cl.BufferedProduceRecords() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the sink's record was never buffered behind the other one")
		}
		time.Sleep(time.Millisecond)
	}
	cancelOther()
	if err := <-otherDone; err == nil {
		t.Fatal("the other record was produced although its context was cancelled while it waited")
	}
	if err := <-done; err != nil {
		t.Fatalf("the sink's pipeline ended with %v", err)
	}
	recs := readAll(t, brokers, "out", 1)
	if string(recs[len(recs)-1].Value) != "ours" {
		t.Fatalf("read %q last; want the sink's record", recs[len(recs)-1].Value)
	}
}

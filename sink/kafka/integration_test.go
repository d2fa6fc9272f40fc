//go:build kafka

package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func TestRealKafkaProducerSinkReadBackByKcat(t *testing.T) {
	if err := testenv.CreateTopic([]string{testenv.Broker().Addr}, "it-out", 2); err != nil {
		t.Fatal(err)
	}
	tr := stream.NewTracker(0)
	vals := make([][]byte, 1000)
	for i := range vals {
		vals[i] = fmt.Appendf(nil, "v%d", i)
	}
	g := stream.New()
	stream.To(stream.From(g, source.Slice(vals, source.Track(tr))),
		kafkasink.NewSink(client(t, []string{testenv.Broker().Addr}), kafkasink.Records("it-out")))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 1000 {
		t.Fatalf("settled %+v", st.Settled)
	}
	out := testenv.Kcat(t, nil, "-b", testenv.Broker().Addr, "-t", "it-out", "-C", "-e", "-q", "-f", `%s\n`)
	if n := len(strings.Fields(string(out))); n != 1000 {
		t.Fatalf("kcat read %d records, want 1000", n)
	}
}

// Against a real broker: a topic's own max.message.bytes is read as
// Kafka answers it (MaxMessageBytes; kfake answers a topic's configuration
// differently), and a batch of small records the topic refuses whole is
// written record by record, each as it came.
func TestRealKafkaSmallTopicLimit(t *testing.T) {
	brokers := []string{testenv.Broker().Addr}
	for _, topic := range []string{"it-small", "it-default"} {
		if err := testenv.CreateTopic(brokers, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	testenv.SetMaxMessageBytes(t, brokers, "it-small", smallTopicLimit)
	cl := client(t, brokers, kgo.ProducerLinger(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits, err := kafkasink.MaxMessageBytes(ctx, cl, "it-small", "it-default")
	if err != nil || limits["it-small"] != smallTopicLimit || limits["it-default"] < 1<<20 {
		t.Fatalf("MaxMessageBytes = %v, %v; want it-small %d and it-default the broker's (1 MiB at least)", limits, err, smallTopicLimit)
	}

	ins := smallValues(40)
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, inputs(tr, ins...)), rejectLarge("service unavailable"))
	stream.To(g.Failures(), kafkasink.NewParking(cl, "it-small", time.Minute))
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != int64(len(ins)) {
		t.Fatalf("settled %+v, want %d parked", st.Settled, len(ins))
	}
	checkWhole(t, readAll(t, brokers, "it-small", len(ins)), ins)
}

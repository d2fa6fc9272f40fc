//go:build kafka

package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

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

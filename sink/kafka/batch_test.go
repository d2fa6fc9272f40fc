package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// smallTopicLimit is the max.message.bytes of the topics of the batch
// tests: a few of their records fit in a batch, forty do not.
const smallTopicLimit = 4 << 10

// smallValues are n incompressible values of 200 bytes, each different.
func smallValues(n int) []input {
	ins := make([]input, n)
	for i := range ins {
		ins[i] = input{value: noise(200 + i), key: string(rune('a' + i%26))}
	}
	return ins
}

// A topic whose max.message.bytes is below the client's batch size: the
// broker refuses a batch of many small records whole, with the error it
// gives a record too large. No record is too large on its own, so each is
// written whole, as it came: none is cut, none fails.
func TestBatchRefusedWholeIsWrittenRecordByRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for refused batches to be retried: make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 1, "retry", "out")
	testenv.SetMaxMessageBytes(t, brokers, "retry", smallTopicLimit)
	testenv.SetMaxMessageBytes(t, brokers, "out", smallTopicLimit)
	ins := smallValues(40)
	// A linger longer than the sink takes to hand over forty records: they
	// go to the broker as one batch, as a busy sink's do.
	cl := client(t, brokers, kgo.ProducerLinger(50*time.Millisecond))

	t.Run("parking", func(t *testing.T) {
		tr := stream.NewTracker(0)
		g := stream.New()
		stream.To(stream.From(g, inputs(tr, ins...)), rejectLarge("service unavailable"))
		park := kafkasink.NewParking(cl, "retry", time.Minute)
		stream.To(g.Failures(), park)
		if err := g.Run(context.Background()); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if st := tr.Stats(); st.Settled[stream.Parked] != int64(len(ins)) {
			t.Fatalf("settled %+v, want %d parked", st.Settled, len(ins))
		}
		checkWhole(t, readAll(t, brokers, "retry", len(ins)), ins)
		if st := park.Stats(); st.Shrunk != 0 {
			t.Fatalf("stats %+v: records were written smaller although each fits the topic", st)
		}
	})
	t.Run("sink", func(t *testing.T) {
		tr := stream.NewTracker(0)
		g := stream.New()
		out := kafkasink.NewSink(cl, kafkasink.Records("out"))
		stream.To(stream.From(g, inputs(tr, ins...)), out)
		var failed []stream.Failure
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			failed = append(failed, m.Value)
			return nil
		}))
		if err := g.Run(context.Background()); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if st := tr.Stats(); st.Settled[stream.Completed] != int64(len(ins)) {
			t.Fatalf("settled %+v, want %d completed; first failure: %v", st.Settled, len(ins), first(failed))
		}
		checkWhole(t, readAll(t, brokers, "out", len(ins)), ins)
	})
}

// checkWhole checks that recs are the values of ins, each whole, without
// the headers of a record written smaller.
func checkWhole(t *testing.T, recs []*kgo.Record, ins []input) {
	t.Helper()
	if len(recs) != len(ins) {
		t.Fatalf("%d records, want %d", len(recs), len(ins))
	}
	want := map[string]bool{}
	for _, in := range ins {
		want[string(in.value)] = true
	}
	cut := 0
	for _, r := range recs {
		h := headerMap(r)
		if _, ok := h[kafkasink.HeaderTruncated]; ok || !want[string(r.Value)] {
			cut++
		}
		if _, ok := h[kafkasink.HeaderHeadersDropped]; ok {
			cut++
		}
		delete(want, string(r.Value))
	}
	if cut > 0 || len(want) > 0 {
		t.Fatalf("%d of %d records are not the value as it came (%d values missing); the first: %d bytes, headers %v",
			cut, len(recs), len(want), len(recs[0].Value), headerMap(recs[0]))
	}
}

func first(fs []stream.Failure) any {
	if len(fs) == 0 {
		return nil
	}
	return fs[0]
}

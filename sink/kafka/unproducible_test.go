package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// An Encoder that returns (nil, nil) for a message (a user bug, or
// "nothing to write for this one") fails that message; Run goes on and
// returns when the input ends. Found in review: franz-go's Produce panicked
// on the nil record after the sink had counted it as pending, so Run
// waited for a promise that never ran (every shutdown hit the drain
// timeout).
func TestNilRecordFailsThatMessage(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, v := range []string{"a", "skip", "b"} {
			if err := out.Send(ctx, stream.NewMessage([]byte(v), tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
	enc := func(m *stream.Message[[]byte]) (*kgo.Record, error) {
		if string(m.Value) == "skip" {
			return nil, nil
		}
		return &kgo.Record{Topic: "out", Value: m.Value}, nil
	}
	stream.To(stream.From(g, src), kafkasink.NewSink(client(t, brokers), enc))
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.Run(ctx)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Run did not return when the input ended (waited for the context, 5 s): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %v, want 2 completed and 1 dead-lettered", st.Settled)
	}
}

// A record the Encoder routes by the message's content to no topic (a
// missing field) is that message's failure, not the broker's: the message
// is failed, and the pipeline goes on. Found in review: it stopped the
// pipeline with the message unsettled, and the replay stopped it again.
func TestRecordWithoutTopicFailsThatMessage(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "out")
	tr := stream.NewTracker(0)
	g := stream.New()
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, v := range []string{"out", "", "out"} {
			if err := out.Send(ctx, stream.NewMessage([]byte(v), tr.Track())); err != nil {
				return err
			}
		}
		return nil
	})
	enc := func(m *stream.Message[[]byte]) (*kgo.Record, error) {
		return &kgo.Record{Topic: string(m.Value), Value: []byte("x")}, nil // topic from the message
	}
	stream.To(stream.From(g, src), kafkasink.NewSink(client(t, brokers), enc))
	var failed int
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error { failed++; return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.Run(ctx)
	if err != nil {
		t.Fatalf("one message without a topic stopped the pipeline: %v", err)
	}
	if st := tr.Stats(); failed != 1 || st.Settled[stream.Completed] != 2 || st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %v, failed %d; want 2 completed and the one without a topic failed", st.Settled, failed)
	}
}

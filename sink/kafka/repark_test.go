package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A message replayed from a parking topic carries the headers of its
// parking. Parked again, its record has one set of failure headers: the
// new replay time, reason and attempt replace the old ones, while the
// original position and the first failure time are kept. Found in review:
// the old headers came first, and ReplayAt read the old, past replay time,
// so a re-parked message was replayed at once (a retry storm).
func TestReparkedMessageHasOneSetOfFailureHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	first := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	tr := stream.NewTracker(0)
	g := stream.New()
	stream.To(stream.From(g, inputs(tr, input{value: []byte("replayed-and-larger-than-16"), key: "k",
		headers: []stream.Header{{Key: "trace", Value: []byte("t-1")},
			{Key: kafkasink.HeaderReplayAt, Value: []byte(past)},
			{Key: kafkasink.HeaderReason, Value: []byte("first failure")},
			{Key: kafkasink.HeaderTopic, Value: []byte("requests")},
			{Key: kafkasink.HeaderPartition, Value: []byte("3")},
			{Key: kafkasink.HeaderOffset, Value: []byte("42")},
			{Key: kafkasink.HeaderFirstFailure, Value: []byte(first)}}})),
		rejectLarge("service unavailable"))
	stream.To(g.Failures(), kafkasink.NewParking(client(t, brokers), "retry", time.Hour))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := readAll(t, brokers, "retry", 1)[0]
	count := map[string]int{}
	for _, h := range r.Headers {
		count[h.Key]++
	}
	for k, n := range count {
		if n != 1 {
			t.Errorf("%d %s headers: %v", n, k, r.Headers)
		}
	}
	env := stream.Envelope{}
	for _, h := range r.Headers {
		env.Headers = append(env.Headers, stream.Header{Key: h.Key, Value: h.Value})
	}
	if due := kafkasink.ReplayAt(&env); time.Until(due) < 50*time.Minute {
		t.Errorf("the re-parked message is due at %v (in %v), want about an hour from now", due, time.Until(due).Round(time.Second))
	}
	h := headerMap(r)
	if h[kafkasink.HeaderReason] != "service unavailable" || h["trace"] != "t-1" || h[kafkasink.HeaderTopic] != "requests" ||
		h[kafkasink.HeaderPartition] != "3" || h[kafkasink.HeaderOffset] != "42" || h[kafkasink.HeaderFirstFailure] != first {
		t.Errorf("headers %v: want the new reason, the original position and first failure, the user's own header", h)
	}
}

// A parking counts the parkings of a message read back from its own topic,
// and starts from 1 for a message from anywhere else, whatever count its
// headers claim; Backoff doubles the delay with that count.
func TestParkingsAreCounted(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry")
	msg := func(topic, parkings string) stream.Message[[]byte] {
		m := stream.NewMessage([]byte("value-longer-than-16-bytes"), stream.Handle{})
		m.Topic, m.Key = topic, []byte(topic)
		m.Headers = []stream.Header{{Key: kafkasink.HeaderParkings, Value: []byte(parkings)}}
		return m
	}
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for _, m := range []stream.Message[[]byte]{msg("retry", "2"), msg("requests", "7")} {
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	stream.To(stream.From(g, src), rejectLarge("unavailable"))
	stream.To(g.Failures(), kafkasink.NewParkingFunc(client(t, brokers), "retry",
		kafkasink.Backoff("retry", time.Second, time.Minute)))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range readAll(t, brokers, "retry", 2) {
		want := map[string]string{"retry": "3", "requests": "1"}[string(r.Key)]
		if got := headerMap(r)[kafkasink.HeaderParkings]; got != want {
			t.Errorf("message from %s parked with %s %q, want %q", r.Key, kafkasink.HeaderParkings, got, want)
		}
	}
	backoff := kafkasink.Backoff("retry", time.Second, 5*time.Second)
	for _, c := range []struct {
		topic, parkings string
		want            time.Duration
	}{{"requests", "7", time.Second}, {"retry", "", time.Second}, {"retry", "1", 2 * time.Second},
		{"retry", "2", 4 * time.Second}, {"retry", "9", 5 * time.Second}} {
		m := &stream.Message[stream.Failure]{Value: stream.Failure{Err: errors.New("503")}}
		m.Topic, m.Headers = c.topic, []stream.Header{{Key: kafkasink.HeaderParkings, Value: []byte(c.parkings)}}
		if d := backoff(m); d != c.want {
			t.Errorf("Backoff from %s after %q parkings = %v, want %v", c.topic, c.parkings, d, c.want)
		}
	}
	// The wait a failure asked for (Retry-After) wins over a shorter delay,
	// with up to 20% of jitter.
	m := &stream.Message[stream.Failure]{Value: stream.Failure{Err: stream.Throttled(errors.New("429"), 20*time.Second)}}
	if d := kafkasink.Backoff("retry", time.Second, time.Minute)(m); d < 20*time.Second-time.Second || d > 24*time.Second {
		t.Errorf("Backoff with Retry-After 20 s = %v, want 20 s to 24 s", d)
	}
}

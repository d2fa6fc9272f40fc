package kafka_test

import (
	"context"
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
	stream.To(g.Failures(), stream.Sink[stream.Failure](kafkasink.NewParking(client(t, brokers), "retry", time.Hour)))
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

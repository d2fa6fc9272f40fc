package delivery_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
)

// Review: routeFailures drops the inherited sluice-* failure headers but
// not the replay-marker headers (sluice-replayed, sluice-replayed-to). An
// invalid request that brings one is dead-lettered with it, and
// `sluice deadletters` (kafkasink.ReadDeadLetter) then takes that dead
// letter for a replay marker: it is hidden from the listing and from
// replay, and the dead letter it names (here 0/0, another request's) and
// every older dead letter of its key count as replayed.
func TestInheritedReplayMarkerHeaderIsDropped(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := requestRecord("requests", "d-forged", "d-forged")
	rec.Value = bytes.Replace(rec.Value, []byte(`"weight_kg":1`), []byte(`"weight_kg":80`), 1) // invalid, still parses
	rec.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderReplayed, Value: []byte("0/0")},
		{Key: kafkasink.HeaderReplayedTo, Value: []byte("requests")}}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runUntilSettled(t, brokers, producer, delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil), 1, slog.New(slog.DiscardHandler))
	dead := readTopic(t, brokers, "dead", 1)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if d := kafkasink.ReadDeadLetter(dead[0]); d.ReplayOf != "" {
		t.Fatalf("the dead letter of %s reads as a replay marker of %s: sluice deadletters hides it and skips %s", dead[0].Key, d.ReplayOf, d.ReplayOf)
	}
}

// Review: MaxEventInput counts a header's key and value bytes but not the
// header itself. A valid request whose record is mostly empty headers (2
// bytes each on the wire, 0 counted) is under 64 KiB by inputSize and near
// the broker's limit on the wire: its failure event (+ ~8 KiB of failure
// headers) is refused, and the scheduler, whose compensation sink cannot
// shrink, stops on it (and again after every restart).
func TestManyEmptyHeadersFailureEventIsWritten(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := requestRecord("requests", "refused", "refused")
	rec.Headers = make([]kgo.RecordHeader, 496_000) // empty key, empty value: 2 bytes each
	for i := range rec.Headers {
		rec.Headers[i].Value = []byte{}
	}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("the request itself fits: %v", err)
	}
	backends := delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	backends.Drones = failingDrones{backends.Drones, "refused"} // reason capped at 4 KiB
	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "many-headers",
		Topics: []string{"requests"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	sch, err := delivery.NewScheduler(delivery.SchedulerConfig{Source: src, Committer: src, Backends: backends, Producer: producer,
		FailuresTopic: "failures", DeadLetterTopic: "dead", Parallelism: 8, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sch.Graph.Run(ctx) }()
	for {
		select {
		case err := <-done:
			t.Fatalf("the scheduler stopped on a valid request that failed for good: %v", err)
		case <-ctx.Done():
			t.Fatal("not settled")
		case <-time.After(50 * time.Millisecond):
		}
		if ps := src.Stats().Partitions; len(ps) > 0 && ps[0].Committed >= 1 {
			cancel()
			<-done
			return
		}
	}
}

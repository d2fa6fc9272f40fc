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

// A valid request whose record is close to the broker's limit (it fit on
// the requests topic) fails for good: its failure event is that value plus
// a few KiB of headers. The event must still be written, or the scheduler
// stops on it, and stops again on it after every restart (a wedged
// partition). The earlier format (a JSON Compensation re-encoded from the
// parsed request) was a few KiB whatever the input.
func TestNearLimitRequestFailureEventIsWritten(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...)) // the workers' defaults
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := requestRecord("requests", "refused", "refused")
	// Pad the JSON with whitespace: still a valid request, 999,000 bytes,
	// under franz-go's default batch limit (1,000,012) and kfake's 1,048,588.
	pad := bytes.Repeat([]byte(" "), 999_000-len(rec.Value))
	rec.Value = append(append([]byte{}, rec.Value[:len(rec.Value)-1]...), append(pad, '}')...)
	if _, err := delivery.Parse(rec.Value); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("the request itself fits: %v", err)
	}
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = failingDrones{backends.Drones, "refused"} // a service's long answer: the reason is capped at 4 KiB

	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "near-limit",
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
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
			if evs := readTopic(t, brokers, "failures", 1); len(evs) != 1 {
				t.Fatalf("%d failure events, want 1", len(evs))
			}
			return
		}
	}
}

// A request record that already carries a sluice-progress header (a
// failure event sent back to the requests topic, as the README says it can
// be; or any producer) and then fails for good: its failure event has two
// sluice-progress headers, the inherited one first, and the supervisor
// reads the first (stream.Envelope.Header). An inherited header that is not
// JSON makes the event malformed: the compensation is dead-lettered, never
// done, and replaying the dead letter fails the same way.
func TestInheritedProgressHeaderDoesNotBreakTheEvent(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := requestRecord("requests", "refused", "refused")
	rec.Headers = []kgo.RecordHeader{{Key: delivery.HeaderProgress, Value: []byte("v2;steps=3")}}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = refusingDrones{backends.Drones, "refused"}
	runUntilSettled(t, brokers, producer, backends, 1, slog.New(slog.DiscardHandler))
	evs := readTopic(t, brokers, "failures", 1)
	if len(evs) != 1 {
		t.Fatalf("%d failure events, want 1", len(evs))
	}
	n := 0
	for _, h := range evs[0].Headers {
		if h.Key == delivery.HeaderProgress {
			n++
		}
	}
	first := func(k string) []byte { return header(evs[0], k) } // what the supervisor's m.Header does
	if _, err := delivery.DecodeCompensation(evs[0].Value, first); err != nil || n != 1 {
		t.Fatalf("the event has %d %s headers; the supervisor cannot decode it: %v", n, delivery.HeaderProgress, err)
	}
}

// A request on the requests topic that carries a sluice-source-topic header
// of its own (any producer can set one) and is invalid is dead-lettered
// naming that topic as its origin, so that `sluice deadletters replay`
// sends it there: here to the failures topic, where the supervisor takes
// it for a compensation of the id it names and cancels that request's
// delivery, drone and package. The scheduler should name where it read the
// record (the requests topic) unless it read it from its own park topic.
func TestDeadLetterNamesWhereTheSchedulerReadIt(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := requestRecord("requests", "d-victim", "d-victim")
	rec.Value = bytes.Replace(rec.Value, []byte(`"weight_kg":1`), []byte(`"weight_kg":80`), 1) // invalid, still parses
	rec.Headers = []kgo.RecordHeader{{Key: "sluice-source-topic", Value: []byte("failures")},
		{Key: delivery.HeaderProgress, Value: []byte(`{"done":[]}`)}}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ledger := delivery.NewLedger()
	runUntilSettled(t, brokers, producer, delivery.Simulated(delivery.SimConfig{}, ledger, nil), 1, slog.New(slog.DiscardHandler))
	dead := readTopic(t, brokers, "dead", 1)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	back, err := kafkasink.ReadDeadLetter(dead[0]).Replay("")
	if err != nil {
		t.Fatal(err)
	}
	if back.Topic != "requests" {
		t.Fatalf("sluice deadletters replay would send the invalid request %s to %q, not back to the requests topic", back.Key, back.Topic)
	}
}

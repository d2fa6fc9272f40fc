package delivery_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// A valid request whose record is close to the broker's limit (it fit on
// the requests topic) fails for good: its failure event is that value plus
// a few KiB of headers. The event must still be written, or the scheduler
// stops on it, and stops again on it after every restart (a wedged
// partition). The earlier format (a JSON Compensation re-encoded from the
// parsed request) was a few KiB whatever the input.
func TestNearLimitRequestFailureEventIsWritten(t *testing.T) {
	rec := requestRecord("requests", "refused", "refused")
	// Pad the JSON with whitespace: still a valid request, 999,000 bytes,
	// under franz-go's default batch limit (1,000,012) and kfake's 1,048,588.
	pad := bytes.Repeat([]byte(" "), 999_000-len(rec.Value))
	rec.Value = append(append([]byte{}, rec.Value[:len(rec.Value)-1]...), append(pad, '}')...)
	if _, err := delivery.Parse(rec.Value); err != nil {
		t.Fatal(err)
	}
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = failingDrones{backends.Drones, "refused"} // a service's long answer: the reason is capped at 4 KiB

	brokers := settleOne(t, rec, backends)
	if evs := readTopic(t, brokers, "failures", 1); len(evs) != 1 {
		t.Fatalf("%d failure events, want 1", len(evs))
	}
}

// A request record that already carries a sluice-progress header (a
// failure event sent back to the requests topic, as docs/dead-letters.md says it can
// be; or any producer) and then fails for good: its failure event has two
// sluice-progress headers, the inherited one first, and the supervisor
// reads the first (stream.Envelope.Header). An inherited header that is not
// JSON makes the event malformed: the compensation is dead-lettered, never
// done, and replaying the dead letter fails the same way.
func TestInheritedProgressHeaderDoesNotBreakTheEvent(t *testing.T) {
	rec := requestRecord("requests", "refused", "refused")
	rec.Headers = []kgo.RecordHeader{{Key: delivery.HeaderProgress, Value: []byte("v2;steps=3")}}
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = refusingDrones{backends.Drones, "refused"}
	brokers := settleOne(t, rec, backends)
	evs := readTopic(t, brokers, "failures", 1)
	if len(evs) != 1 {
		t.Fatalf("%d failure events, want 1", len(evs))
	}
	n := headers(evs[0], delivery.HeaderProgress)
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
	rec := requestRecord("requests", "d-victim", "d-victim")
	rec.Value = bytes.Replace(rec.Value, []byte(`"weight_kg":1`), []byte(`"weight_kg":80`), 1) // invalid, still parses
	rec.Headers = []kgo.RecordHeader{{Key: "sluice-source-topic", Value: []byte("failures")},
		{Key: delivery.HeaderProgress, Value: []byte(`{"done":[]}`)}}
	ledger := delivery.NewLedger()
	brokers := settleOne(t, rec, delivery.Simulated(delivery.SimConfig{}, ledger, nil))
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

// Review: routeFailures drops the inherited sluice-* failure headers but
// not the replay-marker headers (sluice-replayed, sluice-replayed-to). An
// invalid request that brings one is dead-lettered with it, and
// `sluice deadletters` (kafkasink.ReadDeadLetter) then takes that dead
// letter for a replay marker: it is hidden from the listing and from
// replay, and the dead letter it names (here 0/0, another request's) and
// every older dead letter of its key count as replayed.
func TestInheritedReplayMarkerHeaderIsDropped(t *testing.T) {
	rec := requestRecord("requests", "d-forged", "d-forged")
	rec.Value = bytes.Replace(rec.Value, []byte(`"weight_kg":1`), []byte(`"weight_kg":80`), 1) // invalid, still parses
	rec.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderReplayed, Value: []byte("0/0")},
		{Key: kafkasink.HeaderReplayedTo, Value: []byte("requests")}}
	brokers := settleOne(t, rec, delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil))
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
	rec := requestRecord("requests", "refused", "refused")
	rec.Headers = make([]kgo.RecordHeader, 496_000) // empty key, empty value: 2 bytes each
	for i := range rec.Headers {
		rec.Headers[i].Value = []byte{}
	}
	backends := delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	backends.Drones = failingDrones{backends.Drones, "refused"} // reason capped at 4 KiB
	settleOne(t, rec, backends)
}

// settleOne writes rec to the requests topic of a fresh broker (with the
// workers' producer defaults), runs a scheduler over it with backends
// until it is settled, and returns the broker's addresses.
func settleOne(t *testing.T, rec *kgo.Record, backends delivery.Backends) []string {
	t.Helper()
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("the request itself is refused: %v", err)
	}
	runUntilSettled(t, brokers, producer, backends, 1, slog.New(slog.DiscardHandler))
	return brokers
}

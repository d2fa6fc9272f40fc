package delivery_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/source/kafka"
)

// failingDrones refuses to book a drone for one request with an error
// whose text is larger than a Kafka record may be.
type failingDrones struct {
	delivery.Drones
	id string
}

func (d failingDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	if id == d.id {
		return "", errors.New("no drone: " + strings.Repeat("x", 2<<20))
	}
	return d.Drones.Schedule(ctx, id, at)
}

// Requests whose failure would make an oversized record do not stop the
// scheduler: a compensation event carries at most a few KiB of reason, and
// a request with an id no service could take is invalid, dead-lettered.
func TestOversizedFailuresDoNotStopTheScheduler(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	req := func(id string) *kgo.Record { return requestRecord("requests", "k", id) }
	longID := strings.Repeat("i", 600<<10)
	if err := producer.ProduceSync(context.Background(), req("ok"), req("huge-reason"), req(longID)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = failingDrones{backends.Drones, "huge-reason"}
	runUntilSettled(t, brokers, producer, backends, 3, slog.New(slog.DiscardHandler))

	read := func(topic string) []*kgo.Record { return readTopic(t, brokers, topic, 1) }
	events := read("failures")
	if len(events) != 1 {
		t.Fatalf("%d compensation events, want 1", len(events))
	}
	ev, err := delivery.DecodeCompensation(events[0].Value, func(k string) []byte {
		for _, h := range events[0].Headers {
			if h.Key == k {
				return h.Value
			}
		}
		return nil
	})
	if err != nil || ev.Progress.Request.ID != "huge-reason" ||
		len(ev.Reason) > 8<<10 || !strings.HasPrefix(ev.Reason, "schedule_drone") && !strings.Contains(ev.Reason, "no drone") {
		t.Fatalf("compensation event %.200s (%d bytes of reason; err %v)", events[0].Value, len(ev.Reason), err)
	}
	dead := read("dead")
	if len(dead) != 1 || !strings.Contains(string(dead[0].Value), longID[:100]) {
		t.Fatalf("%d dead letters, want the request with the long id", len(dead))
	}
	for _, h := range dead[0].Headers {
		if h.Key == "sluice-reason" && !strings.Contains(string(h.Value), "id is") {
			t.Fatalf("dead letter reason %q, want the id named", h.Value)
		}
	}
	if ledger.Live("drones", "huge-reason") || !ledger.Live("packages", "huge-reason") {
		t.Fatal("the failed request should have its package booked (for the supervisor to undo) and no drone")
	}
}

// requestRecord is a valid delivery request with id, as a record for topic
// with key.
func requestRecord(topic, key, id string) *kgo.Record {
	b, _ := json.Marshal(delivery.Request{ID: id, Owner: "o-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour)})
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b}
}

// runUntilSettled runs a scheduler reading "requests" (failures to
// "failures", dead letters to "dead") until n records are committed, and
// stops it.
func runUntilSettled(t *testing.T, brokers []string, producer *kgo.Client, backends delivery.Backends, n int64, logger *slog.Logger) {
	t.Helper()
	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "settle",
		Topics: []string{"requests"}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	sch, err := delivery.NewScheduler(delivery.SchedulerConfig{Source: src, Committer: src, Backends: backends, Producer: producer,
		FailuresTopic: "failures", DeadLetterTopic: "dead", Parallelism: 8, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sch.Graph.Run(ctx) }()
	waitCommitted(t, sch, done, 30*time.Second, n, func() (committed int64) {
		for _, p := range src.Stats().Partitions {
			committed = p.Committed
		}
		return committed
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitCommitted waits until committed() reports n records committed,
// failing the test with the stages' numbers if it takes longer than
// limit, or if the scheduler's run (done) ends first.
func waitCommitted(t *testing.T, sch *delivery.Scheduler, done <-chan error, limit time.Duration, n int64, committed func() int64) {
	t.Helper()
	got := int64(0)
	for deadline := time.Now().Add(limit); got < n; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the scheduler stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			for _, st := range sch.Graph.Stats() {
				t.Logf("%+v", st)
			}
			t.Fatalf("requests not all settled: committed %d of %d", got, n)
		}
		got = committed()
	}
}

// readTopic returns the records of a one-partition topic: once it has n
// (or 10 s have passed), and whatever more comes within 300 ms, so that a
// test sees a record too many.
func readTopic(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	var out []*kgo.Record
	for len(out) < n && rctx.Err() == nil {
		out = append(out, cl.PollRecords(rctx, 0).Records()...)
	}
	more, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return append(out, cl.PollRecords(more, 0).Records()...)
}

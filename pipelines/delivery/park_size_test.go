package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
)

// throttledOnce answers each request's first drone booking with HTTP 429:
// a service throttling for longer than the scheduler's retries, so the
// request is parked, and replayed.
type throttledOnce struct {
	delivery.Drones
	mu   sync.Mutex
	seen map[string]bool
}

func (d *throttledOnce) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	d.mu.Lock()
	first := !d.seen[id]
	d.seen[id] = true
	d.mu.Unlock()
	if first {
		return "", &flow.HTTPError{Method: http.MethodPut, URL: "/drones/" + id, Status: http.StatusTooManyRequests}
	}
	return d.Drones.Schedule(ctx, id, at)
}

// The topics of the parking tests.
const (
	parkRequests = "requests"
	parkTopic    = "requests-retry"
	parkFailures = "failures"
	parkDead     = "dead"
)

// runParked runs a scheduler that parks on parkTopic, its producer made
// with opts, until every request of ids is delivered, a request is
// dead-lettered or compensated, or 30 s have passed; it returns the ledger.
func runParked(t *testing.T, brokers []string, ids []string, opts ...kgo.Opt) *delivery.Ledger {
	t.Helper()
	ctx := context.Background()
	src, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "park-test",
		Topics: []string{parkRequests}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "park-test-replay",
		Topics: []string{parkTopic}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = &throttledOnce{Drones: backends.Drones, seen: map[string]bool{}}
	retry := flow.Interactive()
	retry.MaxAttempts = 1
	sch, err := delivery.NewScheduler(delivery.SchedulerConfig{Source: src, Committer: src, Backends: backends,
		Producer: producer, FailuresTopic: parkFailures, DeadLetterTopic: parkDead,
		ParkTopic: parkTopic, Replay: replay, ReplayCommitter: replay, ReplayAfter: 20 * time.Millisecond,
		MaxReplayDelay: 50 * time.Millisecond, Retry: &retry, Parallelism: 64, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sch.Graph.Run(runCtx) }()
	delivered := func() int {
		n := 0
		for _, id := range ids {
			if ledger.Live("deliveries", id) {
				n++
			}
		}
		return n
	}
	ends := func(topic string) int64 {
		n := int64(0)
		for _, o := range testenv.EndOffsets(t, brokers, topic) {
			n += o
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); delivered() < len(ids) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the scheduler stopped: %v", err)
		default:
		}
		if ends(parkDead)+ends(parkFailures) > 0 {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the scheduler stopped: %v", err)
	}
	src.Close(ctx)
	replay.Close(ctx)
	for _, topic := range []string{parkDead, parkFailures} {
		if recs := readTopic(t, brokers, topic, 0); len(recs) > 0 {
			r := recs[0]
			t.Fatalf("%d requests went to %s, want none: the first (%d bytes, truncated %q, reason %q)", len(recs), topic,
				len(r.Value), header(r, kafkasink.HeaderTruncated), capped(header(r, kafkasink.HeaderReason)))
		}
	}
	if n := delivered(); n != len(ids) {
		t.Fatalf("%d of %d requests delivered", n, len(ids))
	}
	return ledger
}

var quietLogger = slog.New(slog.DiscardHandler)

// capped is at most 300 bytes of b, for a test's message.
func capped(b []byte) string { return string(b[:min(len(b), 300)]) }

// Valid requests throttled at once are parked at once: a batch of their
// records is larger than the park topic's max.message.bytes (2 KiB here,
// each record ~550 bytes; not compressed, as records that differ more
// than these would not be), and the broker refuses it whole. Each must be
// parked as it came, replayed and delivered: shrunk for the batch's size,
// they were dead-lettered as malformed with their packages booked. (16
// requests: 20 failures would open the drone step's circuit breaker.)
func TestRequestsParkedTogetherComeBackWhole(t *testing.T) {
	brokers := testenv.Kfake(t, 1, parkRequests, parkTopic, parkFailures, parkDead)
	testenv.SetMaxMessageBytes(t, brokers, parkTopic, 2<<10)
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, id := range ids {
		recs = append(recs, requestRecord(parkRequests, id, id))
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runParked(t, brokers, ids, kgo.ProducerBatchCompression(kgo.NoCompression()))
	for _, r := range readTopic(t, brokers, parkTopic, len(ids)) {
		if _, err := delivery.Parse(r.Value); err != nil {
			t.Fatalf("a parked record does not read as a request: %v", err)
		}
	}
}

package delivery_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
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
	body string // of the 429
	mu   sync.Mutex
	seen map[string]bool
}

func (d *throttledOnce) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	d.mu.Lock()
	first := !d.seen[id]
	d.seen[id] = true
	d.mu.Unlock()
	if first {
		return "", &flow.HTTPError{Method: http.MethodPut, URL: "/drones/" + id, Status: http.StatusTooManyRequests, Body: d.body}
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

// parkRun is what a parking test changes in runParked.
type parkRun struct {
	requests string    // the requests topic (default parkRequests)
	body     string    // of the drone service's 429
	opts     []kgo.Opt // of the scheduler's producer
}

// runParked runs a scheduler that parks on parkTopic until every request
// of ids is delivered, a request is dead-lettered or compensated, or 30 s
// have passed; it returns the ledger.
func runParked(t *testing.T, brokers []string, ids []string, run parkRun) *delivery.Ledger {
	t.Helper()
	ctx := context.Background()
	if run.requests == "" {
		run.requests = parkRequests
	}
	src, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "park-test",
		Topics: []string{run.requests}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "park-test-replay",
		Topics: []string{parkTopic}, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, run.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	ledger := delivery.NewLedger()
	backends := delivery.Simulated(delivery.SimConfig{}, ledger, nil)
	backends.Drones = &throttledOnce{Drones: backends.Drones, body: run.body, seen: map[string]bool{}}
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

// A valid request close to the broker's limit, throttled once, is parked:
// the parking's headers (~350 bytes) make its record larger than the limit.
// Its replay must read the request back whole, and deliver it: parked with
// its value cut in half it was dead-lettered as malformed.
func TestNearLimitRequestIsParkedWhole(t *testing.T) {
	const limit = 64 << 10
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, parkRequests, parkTopic, parkFailures, parkDead),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(limit)}))
	rec := requestRecord(parkRequests, "big", "big")
	rec.Value = withNote(rec.Value, limit-len(rec.Value)-300)
	produceRequest(t, brokers, rec)
	runParked(t, brokers, []string{"big"}, parkRun{})
	checkParked(t, brokers, rec.Value)
}

// The largest compact form of a parked request fits a park topic of
// MaxParkedRecord bytes: a valid request whose id and owner have the
// longest text JSON makes of 256 bytes (each byte escaped to six), read
// from a topic with the longest name Kafka allows, refused with a long
// answer, and too large to park as it came.
func TestLargestCompactParkingFitsMaxParkedRecord(t *testing.T) {
	requests := strings.Repeat("r", 249)
	brokers := testenv.Kfake(t, 1, requests, parkTopic, parkFailures, parkDead)
	testenv.SetMaxMessageBytes(t, brokers, parkTopic, delivery.MaxParkedRecord)
	prio := 2
	id := strings.Repeat("<", delivery.MaxIDLen)
	b, err := json.Marshal(delivery.Request{ID: id, Owner: strings.Repeat("\x01", delivery.MaxIDLen),
		Pickup: delivery.Location{Lat: -89.12345678901234, Lon: -179.12345678901234}, Dropoff: delivery.Location{Lat: -88.12345678901234, Lon: -178.12345678901234},
		Size: "medium", WeightKg: 24.123456789012345, Priority: &prio,
		Deadline: time.Now().Add(time.Hour).In(time.FixedZone("", -(9*3600 + 30*60)))})
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: requests, Key: []byte(strings.Repeat("k", delivery.MaxIDLen+1)), Value: withNote(b, delivery.MaxParkedRecord)}
	produceRequest(t, brokers, rec)
	runParked(t, brokers, []string{id}, parkRun{requests: requests, body: strings.Repeat("\x01", 16<<10)})
	checkParked(t, brokers, rec.Value)
}

// withNote adds to a request's JSON a field of its sender's that the
// scheduler does not read, of n random letters (the producer compresses
// batches).
func withNote(req []byte, n int) []byte {
	note := make([]byte, n)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range note {
		note[i] = 'a' + byte(rnd.IntN(26))
	}
	v := append(bytes.TrimSuffix(req, []byte("}")), `,"note":"`...)
	return append(append(v, note...), `"}`...)
}

func produceRequest(t *testing.T, brokers []string, rec *kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("the request does not fit its topic: %v", err)
	}
}

// checkParked checks that the park topic holds the request whose record's
// value was original, re-encoded (it was too large to park as it came),
// and that it reads as the same request.
func checkParked(t *testing.T, brokers []string, original []byte) {
	t.Helper()
	want, err := delivery.Parse(original)
	if err != nil {
		t.Fatal(err)
	}
	parked := readTopic(t, brokers, parkTopic, 1)
	if len(parked) == 0 {
		t.Fatal("the request was never parked: the test proves nothing")
	}
	for _, r := range parked {
		n := len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		t.Logf("parked record: %d bytes of key, value and headers (MaxParkedRecord %d)", n, delivery.MaxParkedRecord)
		got, err := delivery.Parse(r.Value)
		if err != nil || !got.Deadline.Equal(want.Deadline) {
			t.Fatalf("parked record of %d bytes reads as %+v, %v; want %+v", len(r.Value), got, err, want)
		}
		got.Deadline = want.Deadline
		if !reflect.DeepEqual(got, want) || header(r, delivery.HeaderReencoded) == nil {
			t.Fatalf("parked record of %d bytes (%s %q) reads as %+v; want %+v", len(r.Value), delivery.HeaderReencoded,
				header(r, delivery.HeaderReencoded), got, want)
		}
	}
}

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
	runParked(t, brokers, ids, parkRun{opts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}})
	for _, r := range readTopic(t, brokers, parkTopic, len(ids)) {
		if _, err := delivery.Parse(r.Value); err != nil {
			t.Fatalf("a parked record does not read as a request: %v", err)
		}
	}
}

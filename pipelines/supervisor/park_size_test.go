package supervisor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// Forty compensations whose drone cancel fails for now are parked at
// once on a retry topic whose max.message.bytes (2 KiB) is below the
// producer's batch size: the broker refuses their batch whole. Each must
// be parked as it came and replayed until every undo is done; none may be
// dead-lettered (an undo that cannot be done now is never forgotten).
func TestCompensationsParkedTogetherComeBackWhole(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	testenv.SetMaxMessageBytes(t, brokers, topicRetry, 2<<10)
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	l, b := bookedServices(t, ids, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	values, _ := produceEvents(t, brokers, ids)
	// Not compressed: these events differ so little that snappy packs
	// their batch under the limit, which real ones would not.
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, notifier: supervisor.NewNotifications(),
		producerOpts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}})
	waitFor(t, func() bool {
		return len(liveFor(l, ids)) == 0 || len(readAll(t, brokers, topicDead, 1)) > 0
	}, func() string { return fmt.Sprintf("still booked: %v; Run: %v", liveFor(l, ids), stop()) })
	if err := stop(); err != nil {
		t.Fatalf("the supervisor stopped: %v", err)
	}
	if dead := readAll(t, brokers, topicDead, 1); len(dead) > 0 {
		t.Fatalf("%d compensations dead-lettered, want none: the first %s (truncated %q): %s", len(dead), dead[0].Key,
			header(dead[0], kafkasink.HeaderTruncated), header(dead[0], kafkasink.HeaderReason))
	}
	parked := readAll(t, brokers, topicRetry, 1)
	if len(parked) < len(ids) {
		t.Fatalf("%d parked records, want one per compensation at least: the test proves too little", len(parked))
	}
	for _, r := range parked {
		if v := values[string(r.Key)]; string(r.Value) != string(v) {
			t.Fatalf("parked record of %s is not its event as it came: %d bytes of %d", r.Key, len(r.Value), len(v))
		}
	}
}

// A compensation event larger than the retry topic's max.message.bytes
// (the failures topic takes it: its limit is the broker's) whose undo
// fails for now must be parked in a form its replay reads back whole, and
// be compensated: cut in half it was dead-lettered as malformed, with its
// drone booked.
func TestEventTooLargeForRetryTopicIsParkedWhole(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	testenv.SetMaxMessageBytes(t, brokers, topicRetry, 16<<10)
	l, b := bookedServices(t, []string{"big"}, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	req := []byte(`{"id":"big","owner":"o-big","pickup":{"lat":47.6,"lon":-122.3},"dropoff":{"lat":47.7,"lon":-122.2},` +
		`"size":"small","weight_kg":1,"deadline":"2030-01-01T00:00:00Z","note":"` + string(noise(20<<10)) + `"}`)
	cl := kafkaClient(t, brokers)
	rec := &kgo.Record{Topic: topicFailures, Key: []byte("big"), Value: req, Headers: []kgo.RecordHeader{
		{Key: delivery.HeaderProgress, Value: []byte(`{"done":["check_account","create_package","schedule_drone"],"drone_id":"d-7",` +
			`"stage":"create_delivery","reason":"no delivery slot"}`)},
		{Key: kafkasink.HeaderStage, Value: []byte("create_delivery")}, {Key: kafkasink.HeaderReason, Value: []byte("no delivery slot")}}}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	notes := &keepingNotifier{byID: map[string]delivery.Compensation{}}
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, notifier: notes})
	waitFor(t, func() bool {
		_, ok := notes.get("big")
		return ok || len(readAll(t, brokers, topicDead, 1)) > 0
	}, func() string { return fmt.Sprintf("neither compensated nor dead-lettered; Run: %v", stop()) })
	if err := stop(); err != nil {
		t.Fatalf("the supervisor stopped: %v", err)
	}
	if dead := readAll(t, brokers, topicDead, 1); len(dead) > 0 {
		t.Fatalf("the compensation was dead-lettered: %s (truncated %q)", header(dead[0], kafkasink.HeaderReason),
			header(dead[0], kafkasink.HeaderTruncated))
	}
	if live := liveFor(l, []string{"big"}); len(live) > 0 {
		t.Fatalf("still booked: %v", live)
	}
	ev, _ := notes.get("big")
	if ev.Stage != "create_delivery" || ev.Reason != "no delivery slot" || ev.Progress.DroneID != "d-7" {
		t.Fatalf("the owner is told stage %q, reason %q, drone %q: want the request's failure as the event said",
			ev.Stage, ev.Reason, ev.Progress.DroneID)
	}
}

// noise returns n random lower-case letters: text that compression does
// not shrink (the producer compresses batches).
func noise(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return b
}

// The largest compact form of a parked compensation fits a retry topic of
// supervisor.MaxParkedRecord bytes: an event of a valid request whose id
// and owner have the longest text JSON makes of 256 bytes (each byte
// escaped to six), with the longest drone, tier, stage and reason the
// form keeps, a key too long to keep, too large to park as it came. The
// test's failures topic and undo answer are short: the record is measured
// and the room the longest topic name (249 bytes) and a reason at the cap
// (4 KiB) would take is added.
func TestLargestCompactParkingFitsMaxParkedRecord(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	testenv.SetMaxMessageBytes(t, brokers, topicRetry, supervisor.MaxParkedRecord)
	id := strings.Repeat("<", delivery.MaxIDLen)
	l, b := bookedServices(t, []string{id}, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	prio := 2
	long := func(n int) string { return strings.Repeat("\x01", n) }
	ev := map[string]any{
		"progress": map[string]any{
			"request": delivery.Request{ID: id, Owner: long(delivery.MaxIDLen),
				Pickup:  delivery.Location{Lat: -89.12345678901234, Lon: -179.12345678901234},
				Dropoff: delivery.Location{Lat: -88.12345678901234, Lon: -178.12345678901234},
				Size:    "medium", WeightKg: 24.123456789012345, Priority: &prio,
				Deadline: time.Now().Add(time.Hour).In(time.FixedZone("", -(9*3600 + 30*60)))},
			"done": delivery.Steps, "third_party": true, "tier": long(64), "drone_id": long(64)},
		"stage": long(64), "reason": long(600), "note": string(noise(supervisor.MaxParkedRecord))}
	v, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	cl := kafkaClient(t, brokers)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topicFailures,
		Key: []byte(strings.Repeat("k", delivery.MaxIDLen+1)), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	notes := &keepingNotifier{byID: map[string]delivery.Compensation{}}
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, notifier: notes})
	waitFor(t, func() bool {
		_, ok := notes.get(id)
		return ok || len(readAll(t, brokers, topicDead, 1)) > 0
	}, func() string { return fmt.Sprintf("neither compensated nor dead-lettered; Run: %v", stop()) })
	if err := stop(); err != nil {
		t.Fatalf("the supervisor stopped: %v", err)
	}
	if live := liveFor(l, []string{id}); len(live) > 0 || len(readAll(t, brokers, topicDead, 1)) > 0 {
		t.Fatal("the compensation was not done")
	}
	parked := readAll(t, brokers, topicRetry, 1)
	if len(parked) == 0 {
		t.Fatal("nothing was parked: the test proves nothing")
	}
	for _, r := range parked {
		n := len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		slack := (249 - len(header(r, kafkasink.HeaderTopic))) + (kafkasink.MaxReasonBytes - len(header(r, kafkasink.HeaderReason)))
		// A record batch of one record adds its header (61 bytes) and the
		// varint lengths of the record and of each header.
		const overhead = 61 + 20 + 16*10
		t.Logf("parked record: %d bytes of key, value and headers, %d more at worst (MaxParkedRecord %d)", n, slack, supervisor.MaxParkedRecord)
		if n+slack+overhead > supervisor.MaxParkedRecord || header(r, delivery.HeaderReencoded) == "" {
			t.Fatalf("parked record of %d bytes (%s %q): at worst %d, over MaxParkedRecord", n, delivery.HeaderReencoded,
				header(r, delivery.HeaderReencoded), n+slack+overhead)
		}
	}
}

package demo_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	sinkredis "github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// xadd appends r to the stream of its topic as the Redis Streams
// transport lays a record out, and returns the entry's ID.
func xadd(t *testing.T, rc redis.UniversalClient, r *kgo.Record) string {
	t.Helper()
	var hs []stream.Header
	for _, h := range r.Headers {
		hs = append(hs, stream.Header{Key: h.Key, Value: h.Value})
	}
	args := sinkredis.AppendFields([]any{"XADD", r.Topic, "*"}, sinkredis.Entry{Key: r.Key, Value: r.Value, Headers: hs})
	id, err := rc.Do(context.Background(), args...).Text()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The Redis reader reads a stream to the end it had when the read began,
// page after page, each entry with its key, value and headers in order
// (repeats kept) and its entry ID as its position; from a time on with
// since; a stream that does not exist reads as empty. The same on
// redis-server and on the demo's embedded server.
func TestRedisReaderReadsAStreamToItsEnd(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) { readStreamToItsEnd(t, redisClient(t), true) })
	t.Run("embedded", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { rc.Close() })
		readStreamToItsEnd(t, rc, false) // it does not count the entries removed
	})
}

func readStreamToItsEnd(t *testing.T, rc redis.UniversalClient, countsRemoved bool) {
	ctx := context.Background()
	rd := demo.RedisReader(rc)
	const n = 2500 // more than one page
	ids := make([]string, n)
	for i := range n {
		ids[i] = xadd(t, rc, &kgo.Record{Topic: "s", Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i),
			Headers: []kgo.RecordHeader{{Key: "b", Value: []byte("1")}, {Key: "a", Value: fmt.Appendf(nil, "%d", i)}, {Key: "b", Value: []byte("3")}}})
	}
	var got []*kgo.Record
	err := rd.ReadToEnd(ctx, "s", time.Time{}, func(r *kgo.Record) bool {
		if len(got) == 0 { // written after the read began: not read
			xadd(t, rc, &kgo.Record{Topic: "s", Key: []byte("late"), Value: []byte("late")})
		}
		got = append(got, r)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("read %d entries, want the %d there when the read began", len(got), n)
	}
	for i, r := range got {
		want := []kgo.RecordHeader{{Key: "b", Value: []byte("1")}, {Key: "a", Value: fmt.Appendf(nil, "%d", i)}, {Key: "b", Value: []byte("3")}}
		if string(r.Key) != fmt.Sprintf("k-%d", i) || string(r.Value) != fmt.Sprintf("v-%d", i) || r.Topic != "s" ||
			!reflect.DeepEqual(r.Headers, want) || rd.Position(r) != ids[i] {
			t.Fatalf("entry %d read as key %q value %q topic %s headers %v at %s; want k-%d, v-%d, headers %v at %s",
				i, r.Key, r.Value, r.Topic, r.Headers, rd.Position(r), i, i, want, ids[i])
		}
	}
	if w, err := rd.Written(ctx, "s"); err != nil || w != n+1 {
		t.Fatalf("Written = %d, %v; want %d", w, err, n+1)
	}
	// Since: the entries of a millisecond on, from its first.
	last := got[n-1]
	var since []*kgo.Record
	if err := rd.ReadToEnd(ctx, "s", last.Timestamp, func(r *kgo.Record) bool { since = append(since, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(since) == 0 || since[0].Timestamp.Before(last.Timestamp) || string(since[len(since)-1].Key) != "late" {
		t.Fatalf("since %v: %d entries, want those of that millisecond on, up to the late one", last.Timestamp, len(since))
	}
	// Stopped early by each.
	read := 0
	if err := rd.ReadToEnd(ctx, "s", time.Time{}, func(*kgo.Record) bool { read++; return read < 3 }); err != nil || read != 3 {
		t.Fatalf("stopped at the third: read %d, %v", read, err)
	}
	// No stream: empty, nothing written.
	if err := rd.ReadToEnd(ctx, "none", time.Time{}, func(*kgo.Record) bool { t.Fatal("an entry of no stream"); return true }); err != nil {
		t.Fatal(err)
	}
	if w, err := rd.Written(ctx, "none"); err != nil || w != 0 {
		t.Fatalf("Written of no stream = %d, %v", w, err)
	}
	if !countsRemoved {
		return
	}
	// Entries removed still count as written.
	if err := rc.XTrimMaxLen(ctx, "s", 10).Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := rd.Written(ctx, "s"); err != nil || w != n+1 {
		t.Fatalf("Written after a trim = %d, %v; want %d", w, err, n+1)
	}
}

// A verification over Redis streams judges a run as it does over Kafka
// topics holding the same records: the same dead letters, compensation
// dead letters and compensation events give the same Summary, the same
// count of dead letters written and the same Accounted.
func TestVerifyTheSameOnKafkaAndRedis(t *testing.T) {
	ctx := context.Background()
	topics := []string{"delivery-dead-letters", "delivery-compensation-dead-letters", "delivery-failures"}
	brokers := testenv.Kfake(t, 2, topics...)
	rc := redisClient(t)
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	for _, id := range []string{"d-00000001", "d-00000002", "d-00000003", "d-00000004"} {
		if err := b.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Drones.Schedule(ctx, "d-00000001", r.Pickup); err != nil {
		t.Fatal(err)
	}
	if err := b.Deliveries.Put(ctx, "d-00000001", delivery.Progress{}); err != nil { // completed
		t.Fatal(err)
	}
	for _, id := range []string{"d-00000002", "d-00000003"} { // compensated
		if err := b.Packages.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	reason := func(topic, key, why string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(`{"id":"` + key),
			Headers: []kgo.RecordHeader{{Key: kafkasink.HeaderStage, Value: []byte("parse")}, {Key: kafkasink.HeaderReason, Value: []byte(why)}}}
	}
	event := func(id, cause string) *kgo.Record {
		return &kgo.Record{Topic: "delivery-failures", Key: []byte(id), Value: []byte(`{"id":"` + id + `"}`),
			Headers: []kgo.RecordHeader{{Key: delivery.HeaderCause, Value: []byte(cause)}}}
	}
	records := []*kgo.Record{
		reason("delivery-dead-letters", "malformed-5", "malformed delivery request"),
		reason("delivery-dead-letters", "d-00000004", "create_drone: refused"), // a valid request dead-lettered
		reason("delivery-compensation-dead-letters", "d-00000003", "undo refused"),
		event("d-00000002", delivery.CauseDeadline), // compensated needlessly
		event("d-00000003", delivery.CauseRefused),
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for _, rec := range records {
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		xadd(t, rc, rec)
	}
	record := `{"format":"sluice-loadgen-record","version":1,"sent":6,"duplicates":0,"requests":6}
{"id":"d-00000001","kind":"deliverable"}
{"id":"d-00000002","kind":"deliverable"}
{"id":"d-00000003","kind":"deliverable"}
{"id":"d-00000004","kind":"deliverable"}
{"id":"malformed-5","kind":"malformed"}
{"id":"d-00000006","kind":"deliverable"}
`
	sent, err := loadgen.ReadRecord(strings.NewReader(record))
	if err != nil {
		t.Fatal(err)
	}
	onKafka, err := demo.Verify(sent, l, brokers)
	if err != nil {
		t.Fatal(err)
	}
	onRedis, err := demo.Verify(sent, l, nil, demo.ReadFrom(demo.RedisReader(rc)))
	if err != nil {
		t.Fatal(err)
	}
	if onKafka.OK() || onKafka.Needless != 1 || onKafka.ValidDeadLettered != 1 || onKafka.Lost != 1 || onKafka.CompensationsDeadLettered != 1 {
		t.Fatalf("over Kafka: %s\nwant a FAIL: 1 needless, 1 valid dead-lettered, 1 lost, 1 compensation dead-lettered", onKafka)
	}
	if !reflect.DeepEqual(onKafka, onRedis) {
		t.Fatalf("over Redis: %s\nover Kafka: %s", onRedis, onKafka)
	}
	wk, errK := demo.DeadLettersWritten(ctx, brokers)
	wr, errR := demo.DeadLettersWritten(ctx, nil, demo.ReadFrom(demo.RedisReader(rc)))
	if errK != nil || errR != nil || wk != 2 || wr != wk {
		t.Fatalf("dead letters written: %d (%v) on Kafka, %d (%v) on Redis; want 2", wk, errK, wr, errR)
	}
	if demo.Accounted(sent, l, -1, brokers) || demo.Accounted(sent, l, -1, nil, demo.ReadFrom(demo.RedisReader(rc))) {
		t.Fatal("accounted for, though d-00000006 left no trace")
	}
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	remote, _, err := demo.VerifyRemote(ctx, srv.Client(), srv.URL, sent, nil, true, demo.ReadFrom(demo.RedisReader(rc)))
	if err != nil || !reflect.DeepEqual(*remote, onKafka) {
		t.Fatalf("verified remotely over Redis: %v (%v)\nover Kafka: %s", remote, err, onKafka)
	}
}

package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
)

// streamRecords reads a Redis stream to its end, as the tools read it.
func streamRecords(t *testing.T, rc redis.UniversalClient, name string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	if err := demo.RedisReader(rc).ReadToEnd(ctx, name, time.Time{}, func(r *kgo.Record) bool {
		out = append(out, r)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func newRedisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// sluice verify -transport redis judges a run from the Redis streams as
// it does from Kafka topics holding the same records: the same summary.
func TestVerifyOnRedisStreamsAsOnKafka(t *testing.T) {
	ctx := context.Background()
	topics := []string{"delivery-dead-letters", "delivery-compensation-dead-letters", "delivery-failures"}
	brokers := testenv.Kfake(t, 2, topics...)
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	for _, id := range []string{"d-00000001", "d-00000002"} {
		if err := b.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Drones.Schedule(ctx, "d-00000001", r.Pickup); err != nil {
		t.Fatal(err)
	}
	if err := b.Deliveries.Put(ctx, "d-00000001", delivery.Progress{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Packages.Delete(ctx, "d-00000002"); err != nil { // compensated: refused, says its event
		t.Fatal(err)
	}
	records := []*kgo.Record{
		{Topic: "delivery-dead-letters", Key: []byte("malformed-3"), Value: []byte(`{"id": "`),
			Headers: []kgo.RecordHeader{{Key: kafkasink.HeaderReason, Value: []byte("malformed delivery request")}}},
		{Topic: "delivery-failures", Key: []byte("d-00000002"), Value: []byte(`{}`),
			Headers: []kgo.RecordHeader{{Key: delivery.HeaderCause, Value: []byte(delivery.CauseRefused)}}},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := redisstream.NewProducer(rc)
	defer p.Close()
	for _, rec := range records {
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if err := os.WriteFile(record, []byte(`{"format":"sluice-loadgen-record","version":1,"sent":4,"duplicates":0,"requests":4}
{"id":"d-00000001","kind":"deliverable"}
{"id":"d-00000002","kind":"deliverable"}
{"id":"malformed-3","kind":"malformed"}
{"id":"d-00000004","kind":"deliverable"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-record", record, "-services", srv.URL, "-wait", "0"}
	onKafka, errK := verifyCmd(ctx, append(args, "-brokers", brokers[0]))
	onRedis, errR := verifyCmd(ctx, append(args, "-transport", "redis", "-redis", addr))
	if errK == nil || errR == nil || onKafka.Lost != 1 || onKafka.Completed != 1 || onKafka.Compensated != 1 ||
		onKafka.DeadLettered["malformed"] != 1 || onKafka.Needless != 0 {
		t.Fatalf("over Kafka: %v, %s\nwant d-00000004 lost, one completed, one compensated (refused), one dead-lettered", errK, onKafka)
	}
	if !reflect.DeepEqual(onKafka, onRedis) {
		t.Fatalf("over Redis: %s\nover Kafka: %s", onRedis, onKafka)
	}
}

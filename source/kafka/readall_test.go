package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
)

// A topic whose last offset is a transaction marker (written by a
// transactional producer) is read to its end: the marker is never
// delivered as a record, so "the last record read is end-1" never holds.
func TestReadToEndAfterATransaction(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "dl"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "dl", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n := 0
	err = kafka.ReadToEnd(rctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, "dl", time.Time{}, func(*kgo.Record) bool { n++; return true })
	if err != nil || n != 1 {
		t.Fatalf("read %d records: %v", n, err)
	}
}

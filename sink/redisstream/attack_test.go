package redisstream_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// A record refused by Redis (its stream's key holds a string) fails
// alone: the records written in the same round trip, after it, succeed,
// so that nothing written is reported failed (and written again by a
// replay).
func TestProducerRefusalFailsOnlyTheRefusedRecord(t *testing.T) {
	addr := testenv.Redis(t)
	c := newClient(t, addr)
	ctx := context.Background()
	bad, good := freshStream("not-a-stream"), freshStream("good")
	if err := c.Set(ctx, bad, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := producer(t, addr)
	errs := make([]error, 2)
	p.Produce(ctx, &kgo.Record{Topic: bad, Value: []byte("refused")}, func(_ *kgo.Record, err error) { errs[0] = err })
	p.Produce(ctx, &kgo.Record{Topic: good, Value: []byte("written")}, func(_ *kgo.Record, err error) { errs[1] = err })
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if errs[0] == nil {
		t.Error("the record to a string key succeeded")
	}
	if n := len(readStream(t, c, good)); n != 1 {
		t.Fatalf("%d entries in %s, want the one written", n, good)
	}
	if errs[1] != nil {
		t.Fatalf("the record written to %s was reported failed: %v", good, errs[1])
	}
}

package kafka_test

import (
	"testing"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A poison entry of a Redis stream, dead-lettered by its source, carries
// its delivery count and entry ID; a replay of it (a parking, a dead
// letter replayed) must not carry them on, or a second dead-lettering
// writes them twice.
func TestWithoutFailureHeadersDropsRedisPoisonHeaders(t *testing.T) {
	hs := []stream.Header{{Key: "tenant", Value: []byte("a")}, {Key: "sluice-deliveries", Value: []byte("11")},
		{Key: "sluice-source-id", Value: []byte("1-0")}, {Key: kafkasink.HeaderReason, Value: []byte("poison")}}
	got := kafkasink.WithoutFailureHeaders(hs)
	if len(got) != 1 || got[0].Key != "tenant" {
		t.Fatalf("WithoutFailureHeaders kept %v, want only the record's own header", got)
	}
}

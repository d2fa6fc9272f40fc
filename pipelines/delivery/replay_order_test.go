package delivery_test

import (
	"context"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// parkedFor is a record of request id as the park sink writes it, parked
// at its drone step, due back at due; every such record has the same key,
// so that they share a partition of the park topic.
func parkedFor(id string, due time.Time) *kgo.Record {
	b, _ := json.Marshal(delivery.Request{ID: id, Owner: "o-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1})
	now := time.Now().UTC()
	return &kgo.Record{Topic: "parked", Key: []byte("one-partition"), Value: b, Headers: []kgo.RecordHeader{
		{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepDrone)},
		{Key: kafkasink.HeaderReason, Value: []byte("PUT /drones/" + id + ": HTTP 429 Too Many Requests")},
		{Key: kafkasink.HeaderFailedAt, Value: []byte(now.Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderFirstFailure, Value: []byte(now.Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderReplayAt, Value: []byte(due.UTC().Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderParkings, Value: []byte("1")},
	}}
}

// A replay comes back at its own time, not behind a replay due later in
// its partition of the park topic: parked requests wait different times
// (a Retry-After of 1 s, a parking's doubled delay of 8 s, a stale mark's
// 10 s), and one due later must not hold back those behind it. Found
// measuring a saturated drain: throttled requests, due 1 s after their
// parking, came back seconds late, together, behind a request parked
// again with a longer delay.
func TestReplayIsNotHeldBehindOneDueLaterInItsPartition(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	ctx := context.Background()
	later := time.Now().Add(time.Minute)
	if err := producer.ProduceSync(ctx, parkedFor("r-later", later), parkedFor("r-due", time.Now())).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "r-due delivered before r-later is due (a minute from now)", 20*time.Second, func() bool {
		return ledger.Live("deliveries", "r-due")
	})
	p.stop()
	if ledger.Live("deliveries", "r-later") {
		t.Errorf("r-later delivered before its time (%v)", later)
	}
}

package supervisor_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// keepingNotifier keeps the last compensation it was told of per request.
type keepingNotifier struct {
	mu   sync.Mutex
	byID map[string]delivery.Compensation
}

func (n *keepingNotifier) Notify(_ context.Context, ev delivery.Compensation) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byID[ev.Progress.Request.ID] = ev
	return nil
}

func (n *keepingNotifier) get(id string) (delivery.Compensation, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ev, ok := n.byID[id]
	return ev, ok
}

// A compensation that is parked and replayed notifies the owner with why
// the request failed (the scheduler's stage and reason), as one done at
// once does. In the old format the reason was in the event's value and a
// parking kept it; in the new one it is in sluice-stage/sluice-reason,
// which the supervisor's parking replaces with its own undo failure.
func TestParkedNewFormatEventKeepsItsReason(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	ids := []string{"r-old", "r-new"} // produceEvents: even index old format, odd new
	_, b := bookedServices(t, ids, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 3 {
			return http.StatusInternalServerError
		}
		return 0
	})
	produceEvents(t, brokers, ids)
	notes := &keepingNotifier{byID: map[string]delivery.Compensation{}}
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, maxParkings: 10, notifier: notes})
	waitFor(t, func() bool {
		_, a := notes.get("r-old")
		_, c := notes.get("r-new")
		return a && c
	}, func() string { return "not notified" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		ev, _ := notes.get(id)
		if ev.Stage != string(delivery.StepDrone) || ev.Reason != "schedule_drone: service unavailable" {
			t.Errorf("%s: the owner is told stage %q, reason %q; want the request's failure (schedule_drone: service unavailable)",
				id, ev.Stage, ev.Reason)
		}
	}
}

// A failure event that was written (it fit) and whose undo fails for now is
// parked with the supervisor's headers in place of the scheduler's: a few
// hundred bytes more. If that no longer fits, the parking sink cuts the
// value in half, and the replay cannot decode a request from half a JSON
// document: the compensation is dead-lettered as malformed, and as a
// truncated dead letter `sluice deadletters replay` refuses it. In the
// old format an event was a few KiB whatever the request's record.
func TestNearLimitEventSurvivesParking(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	_, b := bookedServices(t, []string{"big"}, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 2 {
			return http.StatusInternalServerError
		}
		return 0
	})
	cl := kafkaClient(t, brokers)
	req := []byte(`{"id":"big","owner":"o-big","pickup":{"lat":47.6,"lon":-122.3},"dropoff":{"lat":47.7,"lon":-122.2},` +
		`"size":"small","weight_kg":1,"deadline":"2030-01-01T00:00:00Z","priority":0`)
	var written bool
	for size := 1_000_000; size > 990_000 && !written; size -= 64 {
		v := append(append(append([]byte{}, req...), bytes.Repeat([]byte(" "), size-len(req)-1)...), '}')
		rec := &kgo.Record{Topic: topicFailures, Key: []byte("big"), Value: v, Headers: []kgo.RecordHeader{
			{Key: delivery.HeaderProgress, Value: []byte(`{"done":["check_account","create_package"]}`)},
			{Key: kafkasink.HeaderStage, Value: []byte("schedule_drone")},
			{Key: kafkasink.HeaderReason, Value: []byte("no drone")},
			{Key: kafkasink.HeaderTopic, Value: []byte("delivery-requests")},
			{Key: kafkasink.HeaderPartition, Value: []byte("3")},
			{Key: kafkasink.HeaderOffset, Value: []byte("42")}}}
		written = cl.ProduceSync(context.Background(), rec).FirstErr() == nil
	}
	if !written {
		t.Fatal("no event written")
	}
	notes := &keepingNotifier{byID: map[string]delivery.Compensation{}}
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, maxParkings: 10, notifier: notes})
	waitFor(t, func() bool {
		_, ok := notes.get("big")
		return ok || len(readAll(t, brokers, topicDead, 1)) > 0
	}, func() string { return "neither compensated nor dead-lettered" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if dead := readAll(t, brokers, topicDead, 1); len(dead) > 0 {
		t.Fatalf("the compensation was dead-lettered: %s (truncated: %q)", header(dead[0], kafkasink.HeaderReason), header(dead[0], kafkasink.HeaderTruncated))
	}
}

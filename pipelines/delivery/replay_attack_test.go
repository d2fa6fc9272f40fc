package delivery_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// onceThrottled answers the first Schedule of each delivery with a 429
// whose Retry-After no retry budget fits (the request is parked), and
// passes the others on.
type onceThrottled struct {
	delivery.Drones
	mu   sync.Mutex
	seen map[string]bool
}

func (d *onceThrottled) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	d.mu.Lock()
	first := !d.seen[id]
	d.seen[id] = true
	d.mu.Unlock()
	if first {
		return "", &flow.HTTPError{Method: http.MethodPut, URL: "/drones/" + id, Status: http.StatusTooManyRequests,
			Wait: retryAfter, Body: "slow down"}
	}
	return d.Drones.Schedule(ctx, id, at)
}

// A request parked twice — at check_third_party, then, on its replay, at
// schedule_drone — carries on its second parking the steps of both: the
// ones its first parking carried (which its replay skipped) and the one
// its replay did. Its second replay skips all three, and no step is
// called more than it must be.
func TestParkedTwiceCarriesTheStepsOfBothParkings(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	backends.Drones = &onceThrottled{Drones: backends.Drones, seen: map[string]bool{}}
	l := newStepLog(&backends, delivery.StepThirdParty)
	p := startParking(t, brokers, producer, backends, nil)
	if err := producer.ProduceSync(context.Background(), farRequest("requests", "twice")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.await(t, "the request delivered", 30*time.Second, func() bool { return ledger.Live("deliveries", "twice") })
	p.stop()
	parked := readTopicNow(t, brokers, "parked")
	if len(parked) != 2 {
		t.Fatalf("%d parkings, want 2: the test proves nothing", len(parked))
	}
	want := [][]delivery.Step{delivery.Steps[:2], delivery.Steps[:3]}
	for i, r := range parked {
		var s struct {
			Done []delivery.Step `json:"done"`
		}
		h := header(r, delivery.HeaderParkedProgress)
		if err := json.Unmarshal(h, &s); err != nil || !slices.Equal(s.Done, want[i]) {
			t.Errorf("parking %d carries %s (%v), want the steps %v", i+1, h, err, want[i])
		}
	}
	calls := map[delivery.Step]int{delivery.StepAccount: 1, delivery.StepPackage: 1, delivery.StepThirdParty: 2,
		delivery.StepDrone: 2, delivery.StepDelivery: 1}
	for st, n := range calls {
		if got := l.count(st, "twice"); got != n {
			t.Errorf("%s called %d times, want %d", st, got, n)
		}
	}
	if got, _ := l.record("twice"); got.Tier != delivery.Paying || !got.ThirdParty || got.DroneID != "drone-for-twice" ||
		!slices.Equal(got.Done, delivery.Steps[:4]) {
		t.Errorf("delivered as %+v; want paying, a third party, drone-for-twice, four steps before it", outcome(got))
	}
}

// A drone service may move a booking to another drone after it answered
// (a drone grounded, a route re-planned): its booking of the delivery
// id is what holds, as Schedule (create-or-update by delivery id) says
// when asked again. A request parked after its drone was booked, whose
// booking moved before its replay, must be delivered with the drone
// booked now: a parking carries no drone, and the replay calls Schedule
// again (a first version carried the drone id and delivered with the
// drone the booking had moved from).
func TestReplayDeliversWithTheDroneBookedNow(t *testing.T) {
	var mu sync.Mutex
	answered := 0
	// The first answer books drone-a; the service then moves the booking
	// to drone-b, which every later Schedule of the delivery answers.
	moved := func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		answered++
		if answered == 1 {
			return "drone-a-" + id
		}
		return "drone-b-" + id
	}
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, delivery.StepDelivery)
	l.droneID = moved
	p := startParking(t, brokers, producer, backends, nil)
	if err := producer.ProduceSync(context.Background(), farRequest("requests", "moved")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.await(t, "the request delivered", 30*time.Second, func() bool { return ledger.Live("deliveries", "moved") })
	p.stop()
	if n := len(readTopicNow(t, brokers, "parked")); n != 1 {
		t.Fatalf("%d parkings, want 1: the test proves nothing", n)
	}
	if got, _ := l.record("moved"); got.DroneID != "drone-b-moved" {
		t.Errorf("delivered with drone %q, want the drone booked now, drone-b-moved (schedule_drone called %d times)",
			got.DroneID, l.count(delivery.StepDrone, "moved"))
	}
}

// A replay back after its deadline fails before its first step, and is
// compensated: its event lists the steps its parking carried (done
// before the parking, never undone), with the drone they booked, in one
// progress header; no step is called.
func TestLateResumedReplayIsCompensatedForItsStepsDone(t *testing.T) {
	brokers, producer, _, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, "")
	rec := farRequest("parked", "late")
	var r delivery.Request
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		t.Fatal(err)
	}
	r.Deadline = time.Now().Add(-time.Minute)
	rec.Value, _ = json.Marshal(r)
	rec.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepDrone)},
		{Key: delivery.HeaderParkedProgress, Value: []byte(`{"done":["check_account","create_package","check_third_party"],` +
			`"third_party":true,"tier":"paying"}`)}}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "the replay compensated", 30*time.Second, func() bool { return p.stage("compensation-events").In >= 1 })
	p.stop()
	events := readTopicNow(t, brokers, "failures")
	if len(events) != 1 {
		t.Fatalf("%d compensation events, want 1", len(events))
	}
	progress := headers(events[0], delivery.HeaderProgress)
	c, err := delivery.DecodeEvent(events[0])
	parkedHeaders := headers(events[0], delivery.HeaderParkedProgress)
	if err != nil || progress != 1 || parkedHeaders != 0 || !slices.Equal(c.Progress.Done, delivery.Steps[:3]) || !c.Progress.ThirdParty ||
		c.Progress.Tier != delivery.Paying {
		t.Errorf("event (%d progress headers, %d of a parking) reads as %+v (%v); want one header, none of a parking, three steps, a third party, paying",
			progress, parkedHeaders, c.Progress, err)
	}
	for _, st := range delivery.Steps {
		if n := l.count(st, "late"); n != 0 {
			t.Errorf("%s called %d times for a replay past its deadline", st, n)
		}
	}
}

// Two copies of one request at once — a fresh one on the requests topic
// and a replay of it carrying its steps done — end in one delivery, with
// the drone the service booked: the fresh copy calls every step, the
// replay only schedule_drone and create_delivery (PUTs by delivery id,
// which the two share).
func TestFreshCopyAndResumedReplayOfOneRequest(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, "")
	replay := farRequest("parked", "dup")
	replay.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepDrone)},
		{Key: delivery.HeaderParkedProgress, Value: []byte(`{"done":["check_account","create_package","check_third_party"],` +
			`"third_party":true,"tier":"paying"}`)}}
	if err := producer.ProduceSync(context.Background(), farRequest("requests", "dup"), replay).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "both copies through", 30*time.Second, func() bool { return l.count(delivery.StepDelivery, "dup") == 2 })
	p.stop()
	want := map[delivery.Step]int{delivery.StepAccount: 1, delivery.StepPackage: 1, delivery.StepThirdParty: 1, delivery.StepDrone: 2,
		delivery.StepDelivery: 2}
	for st, n := range want {
		if got := l.count(st, "dup"); got != n {
			t.Errorf("%s called %d times, want %d (the fresh copy once, the replay from schedule_drone on)", st, got, n)
		}
	}
	got, _ := l.record("dup")
	if !ledger.Live("deliveries", "dup") || ledger.LiveCount("deliveries") != 1 || got.DroneID != "drone-for-dup" || got.Tier != delivery.Paying {
		t.Errorf("deliveries live: %d (dup %v), delivered as %+v; want one, with drone-for-dup, paying", ledger.LiveCount("deliveries"),
			ledger.Live("deliveries", "dup"), outcome(got))
	}
	if n := len(readTopicNow(t, brokers, "failures")); n != 0 {
		t.Errorf("%d compensation events, want none", n)
	}
}

// A compensation event is no parking: one that reaches the park topic (a
// supervisor parking its compensations on the scheduler's topic, both
// workers given one SLUICE_RETRY_TOPIC; a dead letter of the supervisor
// sent there with `sluice deadletters replay -to`) is the record of a
// request being undone, and its progress header says what the failed
// copy did, not what a replay may skip. Replayed as a request, it must
// start from its first step (as it did before: the scheduler read no
// progress), not book its delivery on a package and drone being undone.
func TestCompensationEventOnTheParkTopicSkipsNoStep(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, "")
	ev := farRequest("parked", "undone")
	ev.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepDelivery)},
		{Key: delivery.HeaderProgress, Value: []byte(`{"done":["check_account","create_package","check_third_party","schedule_drone"],` +
			`"third_party":true,"tier":"paying","drone_id":"drone-for-undone","stage":"create_delivery","reason":"HTTP 409 Conflict"}`)},
		{Key: delivery.HeaderCause, Value: []byte(delivery.CauseRefused)}}
	if err := producer.ProduceSync(context.Background(), ev).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "the record replayed", 30*time.Second, func() bool { return ledger.Live("deliveries", "undone") })
	p.stop()
	for _, st := range delivery.Steps {
		if got := l.count(st, "undone"); got != 1 {
			t.Errorf("%s called %d times for a compensation event replayed from the park topic, want once", st, got)
		}
	}
}

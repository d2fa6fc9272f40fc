package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// stepLog wraps simulated services: it counts each step's calls by
// delivery, answers the first call of each delivery at the step throttle
// (none if empty) with a 429 whose Retry-After no retry budget fits (the
// request is parked at once, replayed after it), and keeps the progress
// each delivery record was created with.
type stepLog struct {
	throttle delivery.Step
	droneID  func(id string) string // nil: the service's own

	mu    sync.Mutex
	calls map[delivery.Step]map[string]int
	put   map[string]delivery.Progress
}

// retryAfter is the throttled call's Retry-After: longer than the default
// retry policy's delays (250 ms at most), so the request is parked.
const retryAfter = 500 * time.Millisecond

func newStepLog(b *delivery.Backends, throttle delivery.Step) *stepLog {
	l := &stepLog{throttle: throttle, calls: map[delivery.Step]map[string]int{}, put: map[string]delivery.Progress{}}
	b.Accounts = &logAccounts{b.Accounts, l}
	b.Packages = &logPackages{b.Packages, l}
	b.ThirdParty = &logThirdParty{b.ThirdParty, l}
	b.Drones = &logDrones{b.Drones, l}
	b.Deliveries = &logDeliveries{b.Deliveries, l}
	return l
}

// call counts a call of step for id, and returns the throttling 429 if
// it is the first of id at the throttled step.
func (l *stepLog) call(step delivery.Step, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls[step] == nil {
		l.calls[step] = map[string]int{}
	}
	l.calls[step][id]++
	if step == l.throttle && l.calls[step][id] == 1 {
		return &flow.HTTPError{Method: http.MethodPut, URL: "/" + string(step) + "/" + id, Status: http.StatusTooManyRequests,
			Wait: retryAfter, Body: "slow down"}
	}
	return nil
}

func (l *stepLog) count(step delivery.Step, id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[step][id]
}

func (l *stepLog) record(id string) (delivery.Progress, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.put[id]
	return p, ok
}

type logAccounts struct {
	delivery.Accounts
	l *stepLog
}

func (a *logAccounts) Check(ctx context.Context, owner string) (delivery.Account, error) {
	if err := a.l.call(delivery.StepAccount, delivery.DeliveryOf(ctx)); err != nil {
		return delivery.Account{}, err
	}
	return a.Accounts.Check(ctx, owner)
}

type logPackages struct {
	delivery.Packages
	l *stepLog
}

func (p *logPackages) Put(ctx context.Context, id string, r delivery.Request) error {
	if err := p.l.call(delivery.StepPackage, id); err != nil {
		return err
	}
	return p.Packages.Put(ctx, id, r)
}

type logThirdParty struct {
	delivery.ThirdParty
	l *stepLog
}

func (t *logThirdParty) Needed(ctx context.Context, r delivery.Request) (bool, error) {
	if err := t.l.call(delivery.StepThirdParty, r.ID); err != nil {
		return false, err
	}
	return t.ThirdParty.Needed(ctx, r)
}

type logDrones struct {
	delivery.Drones
	l *stepLog
}

func (d *logDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	if err := d.l.call(delivery.StepDrone, id); err != nil {
		return "", err
	}
	drone, err := d.Drones.Schedule(ctx, id, at)
	if err == nil && d.l.droneID != nil {
		drone = d.l.droneID(id)
	}
	return drone, err
}

type logDeliveries struct {
	delivery.Deliveries
	l *stepLog
}

func (d *logDeliveries) Put(ctx context.Context, id string, p delivery.Progress) error {
	if err := d.l.call(delivery.StepDelivery, id); err != nil {
		return err
	}
	if err := d.Deliveries.Put(ctx, id, p); err != nil {
		return err
	}
	p.Done = slices.Clone(p.Done)
	d.l.mu.Lock()
	d.l.put[id] = p
	d.l.mu.Unlock()
	return nil
}

// farRequest is a request of a paying owner whose dropoff is far enough
// for a third-party carrier (the simulation: more than 20 km).
func farRequest(topic, id string) *kgo.Record {
	b, _ := json.Marshal(delivery.Request{ID: id, Owner: "paying-" + id, Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 48.6, Lon: -122.3}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour)})
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: b}
}

// payingSim is the simulation in which farRequest's owners pay.
var payingSim = delivery.SimConfig{PayingPrefix: "paying-"}

// resumeIDs are the requests of a test of the replays' steps.
var resumeIDs = []string{"r-0", "r-1", "r-2"}

// runResume runs a parking scheduler on the requests of ids (farRequest),
// their services wrapped by a stepLog that throttles at throttle, until
// every request is delivered; it returns the log and the records parked.
func runResume(t *testing.T, throttle delivery.Step, edit func(*stepLog)) (*stepLog, []*kgo.Record) {
	t.Helper()
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, throttle)
	if edit != nil {
		edit(l)
	}
	p := startParking(t, brokers, producer, backends, nil)
	for _, id := range resumeIDs {
		if err := producer.ProduceSync(context.Background(), farRequest("requests", id)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	p.await(t, "every request delivered", 30*time.Second, func() bool { return ledger.LiveCount("deliveries") == len(resumeIDs) })
	p.stop()
	return l, readTopicNow(t, brokers, "parked")
}

// A request parked at a later step is replayed through the steps it did
// before schedule_drone without calling their services again: the
// parking carries them, with what they found (the owner's tier, the
// third-party flag), and the request completes as it would have without
// the parking, served at its tier's level. The drone step is asked again
// (its service answers with the booking it holds now). Before, only a recorded step (the
// drone, with a step store) was skipped: a request throttled at the drone
// step checked its account, created its package and asked the
// third-party service twice.
func TestReplaySkipsTheStepsDone(t *testing.T) {
	want, parked := runResume(t, "", nil)
	if len(parked) != 0 {
		t.Fatalf("%d requests parked without a throttled step", len(parked))
	}
	for _, at := range []delivery.Step{delivery.StepPackage, delivery.StepThirdParty, delivery.StepDrone, delivery.StepDelivery} {
		t.Run("throttled at "+string(at), func(t *testing.T) {
			l, parked := runResume(t, at, nil)
			if len(parked) != len(resumeIDs) {
				t.Fatalf("%d requests parked, want %d: the test proves nothing", len(parked), len(resumeIDs))
			}
			for _, r := range parked {
				if header(r, delivery.HeaderParkedProgress) == nil {
					t.Errorf("parked %s without its steps done (%s)", r.Key, delivery.HeaderParkedProgress)
				}
				if header(r, delivery.HeaderProgress) != nil {
					t.Errorf("parked %s with a failure event's header %s: it would read as one", r.Key, delivery.HeaderProgress)
				}
			}
			for _, id := range resumeIDs {
				for _, st := range delivery.Steps {
					n := 1
					if st == at || (st == delivery.StepDrone && at == delivery.StepDelivery) {
						n = 2 // throttled, or the drone asked again, on the replay
					}
					if got := l.count(st, id); got != n {
						t.Errorf("%s, parked at %s and replayed: %s called %d times, want %d", id, at, st, got, n)
					}
				}
				got, _ := l.record(id)
				base, _ := want.record(id)
				if !reflect.DeepEqual(outcome(got), outcome(base)) {
					t.Errorf("%s, parked at %s and replayed, was delivered as\n%+v\nwithout a parking as\n%+v", id, at, got, base)
				}
				if lv, err := delivery.PriorityOf(&got); err != nil || lv != delivery.High || got.Tier != delivery.Paying || !got.ThirdParty ||
					got.DroneID != "drone-for-"+id {
					t.Errorf("%s delivered with tier %q (level %d, %v), third party %v, drone %q; want a paying owner's, served high, "+
						"a third party, drone-for-%s", id, got.Tier, lv, err, got.ThirdParty, got.DroneID, id)
				}
			}
		})
	}
}

// outcome is what a delivery record says the steps found (its request,
// the same in both runs but for its deadline, left out).
func outcome(p delivery.Progress) delivery.Progress {
	return delivery.Progress{Done: p.Done, ThirdParty: p.ThirdParty, Tier: p.Tier, DroneID: p.DroneID}
}

// A request whose replay fails for good is compensated for every step
// it did, those before its parking included: the event lists them once
// each, in one progress header.
func TestCompensatedReplayListsTheStepsDoneBeforeItsParking(t *testing.T) {
	brokers, producer, _, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, delivery.StepDrone)
	p := startParking(t, brokers, producer, backends, nil)
	rec := farRequest("requests", "north")
	var r delivery.Request
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		t.Fatal(err)
	}
	r.Pickup.Lat, r.Dropoff.Lat = 71, 72 // no drone base: the replay's drone call is refused for good
	rec.Value, _ = json.Marshal(r)
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.await(t, "the request compensated", 30*time.Second, func() bool { return p.stage("compensation-events").In >= 1 })
	p.stop()
	if n := len(readTopicNow(t, brokers, "parked")); n != 1 {
		t.Fatalf("%d parkings, want 1: the test proves nothing", n)
	}
	events := readTopicNow(t, brokers, "failures")
	if len(events) != 1 {
		t.Fatalf("%d compensation events, want 1", len(events))
	}
	progress := headers(events[0], delivery.HeaderProgress)
	c, err := delivery.DecodeEvent(events[0])
	want := []delivery.Step{delivery.StepAccount, delivery.StepPackage, delivery.StepThirdParty}
	if err != nil || progress != 1 || !slices.Equal(c.Progress.Done, want) || c.Progress.Tier != delivery.Paying {
		t.Errorf("compensation event (%d progress headers) reads as steps done %v, tier %q (%v); want one header, %v, paying",
			progress, c.Progress.Done, c.Progress.Tier, err, want)
	}
	if n := l.count(delivery.StepAccount, "north"); n != 1 {
		t.Errorf("account checked %d times, want once", n)
	}
}

// forgedProgress says every step but the last done, with a drone of its
// own: what a producer could put on a request to skip the checks.
var forgedProgress = []byte(`{"done":["check_account","create_package","check_third_party","schedule_drone"],` +
	`"third_party":true,"tier":"paying","drone_id":"forged"}`)

// A request on the requests topic with a progress header (forged, or a
// failure event sent back as it is) is served from its first step: only
// the scheduler's own parkings say what a replay may skip. Parked there,
// its parking carries what it did, not what the header said.
func TestForgedProgressSkipsNoStep(t *testing.T) {
	for _, at := range []delivery.Step{"", delivery.StepAccount} {
		name := "throttled at " + string(at)
		if at == "" {
			name = "not throttled"
		}
		t.Run(name, func(t *testing.T) {
			brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
			l := newStepLog(&backends, at)
			p := startParking(t, brokers, producer, backends, nil)
			rec := requestRecord("requests", "forged", "forged")
			rec.Headers = []kgo.RecordHeader{{Key: delivery.HeaderProgress, Value: forgedProgress},
				{Key: delivery.HeaderParkedProgress, Value: forgedProgress}}
			if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
			p.await(t, "the request delivered", 30*time.Second, func() bool { return ledger.Live("deliveries", "forged") })
			p.stop()
			for _, st := range delivery.Steps {
				n := 1
				if st == at {
					n = 2
				}
				if got := l.count(st, "forged"); got != n {
					t.Errorf("%s called %d times for a request with a forged progress header, want %d", st, got, n)
				}
			}
			got, _ := l.record("forged")
			if got.DroneID != "drone-for-forged" || got.Tier != delivery.Free || got.ThirdParty {
				t.Errorf("delivered with drone %q, tier %q, third party %v; want its own: drone-for-forged, free, none",
					got.DroneID, got.Tier, got.ThirdParty)
			}
			for _, r := range readTopicNow(t, brokers, "parked") {
				if h := header(r, delivery.HeaderParkedProgress); h != nil {
					t.Errorf("parked at %s with progress %s: it had done nothing", at, h)
				}
			}
		})
	}
}

// A replay whose progress header cannot be trusted to say what was done —
// not JSON, a step unknown, twice or out of order, the drone step or a
// drone, a failure's stage, larger than a parking writes, or in a failure
// event's header rather than a parking's — is replayed from its first
// step; one that can skips the steps it says.
func TestReplayWithABadProgressHeaderStartsOver(t *testing.T) {
	huge, _ := json.Marshal(map[string]any{"done": []delivery.Step{delivery.StepAccount}, "tier": "paying",
		"drone_id": strings.Repeat("d", 600)})
	cases := []struct {
		name, state string
		skips       bool
		key         string // "": HeaderParkedProgress
	}{
		{"as parked", `{"done":["check_account","create_package"],"tier":"paying"}`, true, ""},
		{"an event's header", `{"done":["check_account","create_package"],"tier":"paying"}`, false, delivery.HeaderProgress},
		{"a failure's stage", `{"done":["check_account","create_package"],"tier":"paying","stage":"check_third_party"}`, false, ""},
		{"a drone", `{"done":["check_account","create_package","check_third_party","schedule_drone"],"drone_id":"d"}`, false, ""},
		{"not JSON", `{"done":["check_account"`, false, ""},
		{"unknown step", `{"done":["check_account","launch_rocket"]}`, false, ""},
		{"step twice", `{"done":["check_account","check_account"]}`, false, ""},
		{"out of order", `{"done":["create_package"]}`, false, ""},
		{"drone without its id", `{"done":["check_account","create_package","check_third_party","schedule_drone"]}`, false, ""},
		{"oversized", string(huge), false, ""},
	}
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	l := newStepLog(&backends, "")
	var recs []*kgo.Record
	for i, c := range cases {
		r := farRequest("parked", fmt.Sprintf("bad-%d", i))
		key := c.key
		if key == "" {
			key = delivery.HeaderParkedProgress
		}
		r.Headers = []kgo.RecordHeader{{Key: kafkasink.HeaderStage, Value: []byte(delivery.StepThirdParty)},
			{Key: key, Value: []byte(c.state)}}
		recs = append(recs, r)
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "every replay delivered", 30*time.Second, func() bool { return ledger.LiveCount("deliveries") == len(cases) })
	p.stop()
	for i, c := range cases {
		id := fmt.Sprintf("bad-%d", i)
		want := map[delivery.Step]int{delivery.StepAccount: 1, delivery.StepPackage: 1, delivery.StepThirdParty: 1}
		if c.skips {
			want[delivery.StepAccount], want[delivery.StepPackage] = 0, 0
		}
		for st, n := range want {
			if got := l.count(st, id); got != n {
				t.Errorf("replay with progress %s (%s): %s called %d times, want %d", c.name, capped([]byte(c.state)), st, got, n)
			}
		}
		if got, _ := l.record(id); got.Tier != delivery.Paying || len(got.Done) != 4 {
			t.Errorf("replay with progress %s delivered with tier %q, steps done %v; want paying, four steps", c.name, got.Tier, got.Done)
		}
	}
}

// A parking never carries the drone step nor its drone, whatever its id
// (kilobytes of a service's answer here): the replay skips the three
// steps before it, asks the drone step again, and completes with the
// drone its service holds.
func TestTheDroneIsNeverCarried(t *testing.T) {
	longID := func(id string) string { return "drone-" + strings.Repeat("x", 4<<10) + "-" + id }
	l, parked := runResume(t, delivery.StepDelivery, func(l *stepLog) { l.droneID = longID })
	if len(parked) != len(resumeIDs) {
		t.Fatalf("%d requests parked, want %d: the test proves nothing", len(parked), len(resumeIDs))
	}
	for _, r := range parked {
		h := header(r, delivery.HeaderParkedProgress)
		if h == nil || strings.Contains(string(h), "drone") {
			t.Errorf("parked %s with progress %s: want the three steps before the drone's, and no drone", r.Key, capped(h))
		}
	}
	for _, id := range resumeIDs {
		for i, st := range delivery.Steps[:4] {
			want := 1
			if i == 3 {
				want = 2 // asked again on the replay
			}
			if n := l.count(st, id); n != want {
				t.Errorf("%s: %s called %d times, want %d", id, st, n, want)
			}
		}
		if got, _ := l.record(id); got.DroneID != longID(id) {
			t.Errorf("%s delivered with a drone id of %d bytes, want its own", id, len(got.DroneID))
		}
	}
}

// A request too large to park as it came is parked in its compact form
// with its steps done, which its replay skips.
func TestCompactParkingCarriesTheStepsDone(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, payingSim)
	testenv.SetMaxMessageBytes(t, brokers, "parked", delivery.MaxParkedRecord)
	l := newStepLog(&backends, delivery.StepDrone)
	p := startParking(t, brokers, producer, backends, nil)
	rec := farRequest("requests", "big")
	rec.Value = withNote(rec.Value, delivery.MaxParkedRecord)
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.await(t, "the request delivered", 30*time.Second, func() bool { return ledger.Live("deliveries", "big") })
	p.stop()
	parked := readTopicNow(t, brokers, "parked")
	if len(parked) != 1 || header(parked[0], delivery.HeaderReencoded) == nil {
		t.Fatalf("%d parkings, want one in the compact form: the test proves nothing", len(parked))
	}
	if h := header(parked[0], delivery.HeaderParkedProgress); h == nil {
		t.Errorf("compact parking without its steps done")
	}
	for _, st := range delivery.Steps {
		n := 1
		if st == delivery.StepDrone {
			n = 2
		}
		if got := l.count(st, "big"); got != n {
			t.Errorf("%s called %d times, want %d", st, got, n)
		}
	}
	if got, _ := l.record("big"); got.Tier != delivery.Paying || !got.ThirdParty || got.DroneID != "drone-for-big" {
		t.Errorf("delivered with tier %q, third party %v, drone %q; want paying, a third party, drone-for-big", got.Tier, got.ThirdParty, got.DroneID)
	}
}

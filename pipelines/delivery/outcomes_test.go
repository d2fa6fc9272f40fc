package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// faultyDrones answers every drone call with the error fault returns
// while it is on, as a service in trouble would, and counts those calls.
type faultyDrones struct {
	delivery.Drones
	on     atomic.Bool
	fault  func() error
	failed atomic.Int64
}

func (d *faultyDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	if d.on.Load() {
		d.failed.Add(1)
		return "", d.fault()
	}
	return d.Drones.Schedule(ctx, id, at)
}

func (d *faultyDrones) Booking(ctx context.Context, id string) (string, bool, error) {
	if d.on.Load() {
		return "", false, d.fault()
	}
	return d.Drones.Booking(ctx, id)
}

// parkingScheduler is a scheduler reading "requests", parking on "parked"
// (replayed from it), compensating on "failures", dead-lettering on
// "dead".
type parkingScheduler struct {
	sch  *delivery.Scheduler
	done chan error
	stop func()
}

// parkingRig is a cluster with the topics of a parkingScheduler, a
// producer on it, and simulated services with their ledger.
func parkingRig(t *testing.T, sim delivery.SimConfig) ([]string, *kgo.Client, *delivery.Ledger, delivery.Backends) {
	t.Helper()
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(4, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"),
		kfake.SeedTopics(2, "parked"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	ledger := delivery.NewLedger()
	return brokers, producer, ledger, delivery.Simulated(sim, ledger, nil)
}

func startParking(t *testing.T, brokers []string, producer *kgo.Client, backends delivery.Backends, edit func(*delivery.SchedulerConfig)) *parkingScheduler {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "parking",
		Topics: []string{"requests"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "parking-replay",
		Topics: []string{"parked"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg := delivery.SchedulerConfig{Source: src, Committer: src, Backends: backends, Producer: producer,
		FailuresTopic: "failures", DeadLetterTopic: "dead", ParkTopic: "parked", Replay: replay, ReplayCommitter: replay,
		ReplayAfter: 100 * time.Millisecond, MaxReplayDelay: 200 * time.Millisecond, Parallelism: 16, Logger: quiet}
	if edit != nil {
		edit(&cfg)
	}
	sch, err := delivery.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &parkingScheduler{sch: sch, done: make(chan error, 1)}
	go func() { p.done <- sch.Graph.Run(ctx) }()
	stopped := false
	p.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-p.done; err != nil {
			t.Errorf("the scheduler: %v", err)
		}
		_ = src.Close(context.Background())
		_ = replay.Close(context.Background())
	}
	t.Cleanup(p.stop)
	return p
}

// await polls ok every 20 ms until it holds, failing the test after limit
// or if the scheduler stops.
func (p *parkingScheduler) await(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-p.done:
			t.Fatalf("the scheduler stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			for _, st := range p.sch.Graph.Stats() {
				t.Logf("%+v", st)
			}
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// stage returns the stats of the named stage (zero if there is none).
func (p *parkingScheduler) stage(name string) stream.StageStats {
	for _, st := range p.sch.Graph.Stats() {
		if st.Name == name {
			return st
		}
	}
	return stream.StageStats{}
}

// produceRequests writes n valid requests to "requests".
func produceRequests(t *testing.T, producer *kgo.Client, n int, deadline time.Time) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		r := requestRecord("requests", fmt.Sprint(i), fmt.Sprintf("d-%03d", i))
		if !deadline.IsZero() {
			r = requestWithDeadline("requests", fmt.Sprint(i), fmt.Sprintf("d-%03d", i), deadline)
		}
		recs = append(recs, r)
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A service that answers HTTP 500 for a while — a database failover, a bad
// deploy rolled back — fails requests for now, not for good: they are
// retried, parked and replayed, and complete once it answers again. Before
// 500 counted as transient, every request whose drone call met a 500 was
// compensated at once.
func TestServerErrorsAreParkedNotCompensated(t *testing.T) {
	const n = 40
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := &faultyDrones{Drones: backends.Drones, fault: func() error {
		return &flow.HTTPError{Method: "PUT", URL: "/drones/x", Status: 500, Body: "database failover"}
	}}
	drones.on.Store(true)
	backends.Drones = drones
	produceRequests(t, producer, n, time.Time{})
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "every request fails at the drone step", 30*time.Second, func() bool {
		return p.stage("schedule_drone").Failed >= n
	})
	drones.on.Store(false)
	p.await(t, "every request has an outcome", 30*time.Second, func() bool {
		return ledger.LiveCount("deliveries")+len(readTopicNow(t, brokers, "failures")) >= n
	})
	p.stop()
	if events := readTopicNow(t, brokers, "failures"); len(events) > 0 || ledger.LiveCount("deliveries") != n {
		t.Fatalf("%d of %d requests completed, %d compensated (first: %s), after 500s from the drone service; want all completed",
			ledger.LiveCount("deliveries"), n, len(events), reasonOf(events))
	}
}

// reasonOf is the reason header of the first record, if any.
func reasonOf(recs []*kgo.Record) string {
	if len(recs) == 0 {
		return "none"
	}
	for _, h := range recs[0].Headers {
		if h.Key == "sluice-reason" {
			return string(h.Value)
		}
	}
	return "no reason header"
}

// readTopicNow returns what a topic holds now (all its partitions).
func readTopicNow(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topic, time.Time{}, func(r *kgo.Record) bool {
		out = append(out, r)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requestWithDeadline is requestRecord with the given deadline (zero: none).
func requestWithDeadline(topic, key, id string, deadline time.Time) *kgo.Record {
	b, _ := json.Marshal(delivery.Request{ID: id, Owner: "o-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1, Deadline: deadline})
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: b}
}

// transientDrones is a drone service that answers 503 while on.
func transientDrones(backends *delivery.Backends) *faultyDrones {
	d := &faultyDrones{Drones: backends.Drones, fault: func() error {
		return &flow.HTTPError{Method: "PUT", URL: "/drones/x", Status: 503, Body: "down for maintenance"}
	}}
	d.on.Store(true)
	backends.Drones = d
	return d
}

// An outage longer than a fixed number of parkings does not cancel
// deliveries that can still be made in time: a request is parked and
// replayed for as long as its deadline (an hour away) allows. Before, the
// sixth failure of a request parked five times counted as permanent.
func TestLongOutageIsParkedUntilTheServiceIsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a service outage in real time: make test runs it, -short does not")
	}
	const n = 20
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := transientDrones(&backends)
	produceRequests(t, producer, n, time.Time{})
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "every request parked 8 times, or one compensated", 60*time.Second, func() bool {
		return p.stage("park").In >= 8*n || p.stage("compensation-events").In > 0
	})
	drones.on.Store(false)
	p.await(t, "every request has an outcome", 60*time.Second, func() bool {
		return ledger.LiveCount("deliveries")+int(p.stage("compensation-events").In) >= n
	})
	p.stop()
	if events := readTopicNow(t, brokers, "failures"); len(events) > 0 || ledger.LiveCount("deliveries") != n {
		t.Fatalf("%d of %d requests completed, %d compensated (first: %s) after an outage of 8 parkings; want all completed",
			ledger.LiveCount("deliveries"), n, len(events), reasonOf(events))
	}
}

// A request is compensated only once it can no longer complete before its
// deadline — its own, or DefaultHorizon after its first failure if it has
// none — with a reason that says so; requests with time left stay parked
// meanwhile and complete when the service is back.
func TestDeadlineDecidesWhenAFailureIsFinal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for deadlines in real time: make test runs it, -short does not")
	}
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := transientDrones(&backends)
	// The services answer at once, so the steps' attempt timeouts stay
	// at their floor (they follow the services' latency up to 1 s): the
	// judge counts 5 x 200 ms, and a replay needs 1 s left.
	soon, later := time.Now().Add(2500*time.Millisecond), time.Now().Add(time.Hour)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, requestWithDeadline("requests", "k", fmt.Sprintf("soon-%d", i), soon),
			requestWithDeadline("requests", "k", fmt.Sprintf("none-%d", i), time.Time{}),
			requestWithDeadline("requests", "k", fmt.Sprintf("later-%d", i), later))
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) { c.DefaultHorizon = 2 * time.Second })
	p.await(t, "the requests out of time compensated", 30*time.Second, func() bool {
		return len(readTopicNow(t, brokers, "failures")) >= 20
	})
	events := readTopicNow(t, brokers, "failures")
	for _, ev := range events {
		id := string(ev.Key)
		if c, err := delivery.DecodeEvent(ev); err == nil {
			id = c.Progress.Request.ID
		}
		if !strings.HasPrefix(id, "soon-") && !strings.HasPrefix(id, "none-") {
			t.Errorf("request %s compensated with an hour left", id)
		}
		if r := reasonOf([]*kgo.Record{ev}); !strings.Contains(r, delivery.ErrDeadline.Error()) ||
			!strings.Contains(r, "503") && !strings.Contains(r, "circuit breaker open: schedule_drone") {
			t.Errorf("request %s compensated for %q; want the deadline and the service's failure named", id, r)
		}
	}
	drones.on.Store(false)
	p.await(t, "the requests with time left completed", 30*time.Second, func() bool {
		return ledger.LiveCount("deliveries") >= 10
	})
	p.stop()
	if events := readTopicNow(t, brokers, "failures"); len(events) != 20 || ledger.LiveCount("deliveries") != 10 {
		t.Fatalf("%d compensated, %d completed; want the 20 out of time compensated and the 10 others completed",
			len(events), ledger.LiveCount("deliveries"))
	}
}

// Services 250 ms slow, past the steps' 200 ms attempt timeout (and
// within their 400 ms budget): the scheduler slows down (its source lags)
// rather than failing the calls.
// Only the calls made before a step learned the services' latency time
// out, and their requests are parked and complete on replay. With the
// fixed 200 ms timeout every call times out, whatever the replays: every
// request was parked over and over, and compensated after five parkings
// (with its deadline deciding, it would never complete).
func TestSlowServicesSlowTheSchedulerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs against slowed services for seconds: make test runs it, -short does not")
	}
	const n = 200
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{MinLatency: 250 * time.Millisecond, MaxLatency: 255 * time.Millisecond})
	produceRequests(t, producer, n, time.Time{})
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "every request has an outcome", 90*time.Second, func() bool {
		return ledger.LiveCount("deliveries")+int(p.stage("compensation-events").In) >= n
	})
	p.stop()
	// How many are parked first depends on how loaded the machine is (a
	// call the scheduler's CPU holds up past the 400 ms budget times out);
	// 80 on a quiet one, the calls in flight before each step learned.
	t.Logf("%d requests completed, %d parkings", ledger.LiveCount("deliveries"), p.stage("park").In)
	if events := readTopicNow(t, brokers, "failures"); len(events) > 0 || ledger.LiveCount("deliveries") != n {
		t.Fatalf("%d of %d completed, %d compensated (first: %s); want all completed", ledger.LiveCount("deliveries"), n,
			len(events), reasonOf(events))
	}
}

// Requests parked because a service was down are replayed as soon as it
// is back — once a call to it went through and its step's breaker closed
// — not at their scheduled time (here 20 s after their parking). Before,
// they waited out the delay.
func TestParkedRequestsReplayWhenTheServiceIsBack(t *testing.T) {
	const n = 40
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := transientDrones(&backends)
	produceRequests(t, producer, n, time.Time{})
	p := startParking(t, brokers, producer, backends, func(c *delivery.SchedulerConfig) {
		c.ReplayAfter, c.MaxReplayDelay = 20*time.Second, 20*time.Second
	})
	p.await(t, "every request parked", 30*time.Second, func() bool { return p.stage("park").In >= n })
	drones.on.Store(false)
	back := time.Now()
	// New work keeps arriving, as it does (a request every 250 ms): its
	// calls find the service back.
	fresh := 0
	p.await(t, "every parked request completed", 30*time.Second, func() bool {
		if time.Since(back) > time.Duration(fresh)*250*time.Millisecond {
			fresh++
			r := requestWithDeadline("requests", "fresh", fmt.Sprintf("fresh-%d", fresh), time.Time{})
			if err := producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if !ledger.Live("deliveries", fmt.Sprintf("d-%03d", i)) {
				return false
			}
		}
		return true
	})
	if took := time.Since(back); took > 10*time.Second {
		t.Fatalf("the parked requests completed %v after the service was back; want at once, not at their replay time (20 s)", took)
	}
}

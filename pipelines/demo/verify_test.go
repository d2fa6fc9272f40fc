package demo_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// The services' ledger, a copy of it and a copy downloaded over HTTP give
// the same verification, whatever the rules are: a run verified from
// another process is judged as the demo judges its own.
func TestVerifyTheSameOverEveryLedgerView(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters")
	l := delivery.NewLedger()
	b := delivery.SimulatedNonIdempotent(delivery.SimConfig{}, l, loadgen.SuspendedOwner)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	book := func(id string, drones int, undo ...func(context.Context, string) error) {
		t.Helper()
		if err := b.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
		for range drones {
			if _, err := b.Drones.Schedule(ctx, id, r.Pickup); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Deliveries.Put(ctx, id, delivery.Progress{}); err != nil {
			t.Fatal(err)
		}
		for _, u := range undo {
			if err := u(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	book("d-00000001", 1)                                                          // completed
	book("d-00000002", 1, b.Deliveries.Delete, b.Drones.Cancel, b.Packages.Delete) // compensated
	book("d-00000004", 2)                                                          // a drone booked twice
	book("d-00000005", 1, b.Drones.Cancel, b.Packages.Delete)                      // a delivery left after compensation
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for key, reason := range map[string]string{"malformed-6": "malformed delivery request", "d-00000007": "account suspended",
		"d-00000008": "create_package: packages: rejected by the service"} {
		rec := &kgo.Record{Topic: "delivery-dead-letters", Key: []byte(key),
			Headers: []kgo.RecordHeader{{Key: kafkasink.HeaderReason, Value: []byte(reason)}}}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	record := `{"format":"sluice-loadgen-record","version":1,"sent":10,"duplicates":2,"requests":8}
{"id":"d-00000001","kind":"deliverable"}
{"id":"d-00000002","kind":"undeliverable"}
{"id":"d-00000003","kind":"deliverable"}
{"id":"d-00000004","kind":"deliverable"}
{"id":"d-00000005","kind":"deliverable"}
{"id":"malformed-6","kind":"malformed"}
{"id":"d-00000007","kind":"suspended"}
{"id":"d-00000008","kind":"deliverable"}
`
	sent, err := loadgen.ReadRecord(strings.NewReader(record))
	if err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	downloaded, err := delivery.FetchLedger(ctx, srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	views := map[string]demo.LedgerView{"snapshot": l.Snapshot(), "download": downloaded}
	want, err := demo.Verify(sent, l, brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(want)
	if want.Twice != 1 || want.Sent != 10 || want.Duplicates != 2 || want.OK() {
		t.Fatalf("the ledger's own verification: %s; want a drone booked twice and a FAIL", want)
	}
	// Accounted, without and with the count of dead letters written, for
	// the run (d-00000003 left no trace) and for the run without it.
	all := strings.Replace(record, `{"id":"d-00000003","kind":"deliverable"}`+"\n", "", 1)
	all = strings.Replace(all, `"requests":8`, `"requests":7`, 1)
	whole, err := loadgen.ReadRecord(strings.NewReader(all))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sent *loadgen.Sent
		dead int
	}{{sent, -1}, {sent, 3}, {whole, -1}, {whole, 3}} {
		want := demo.Accounted(c.sent, l, c.dead, brokers)
		if want && c.sent == sent {
			t.Fatalf("accounted over the ledger with %d dead letters, although d-00000003 left no trace", c.dead)
		}
		for name, view := range views {
			if got := demo.Accounted(c.sent, view, c.dead, brokers); got != want {
				t.Errorf("accounted over the %s (%d requests, %d dead letters): %v, over the ledger %v",
					name, c.sent.Distinct(), c.dead, got, want)
			}
		}
	}
	for name, view := range views {
		got, err := demo.Verify(sent, view, brokers)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("over the %s: %s\nover the ledger: %s", name, got, want)
		}
	}
}

// A request the load generator sent without ever hearing back is not
// expected: without a trace it is counted apart, not lost, and the run
// is accounted for without it; one that reached the workers anyway is
// judged like the others.
func TestVerifyDoesNotExpectUnconfirmedRequests(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters")
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, loadgen.SuspendedOwner)
	for _, id := range []string{"d-00000001", "d-00000003"} { // completed: package, drone and delivery
		if err := b.Packages.Put(ctx, id, delivery.Request{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Drones.Schedule(ctx, id, delivery.Location{Lat: 47.6, Lon: -122.3}); err != nil {
			t.Fatal(err)
		}
		if err := b.Deliveries.Put(ctx, id, delivery.Progress{}); err != nil {
			t.Fatal(err)
		}
	}
	record := `{"format":"sluice-loadgen-record","version":2,"sent":1,"duplicates":0,"requests":1,"unconfirmed":2}
{"id":"d-00000001","kind":"deliverable"}
{"id":"d-00000002","kind":"deliverable","unconfirmed":true}
{"id":"d-00000003","kind":"deliverable","unconfirmed":true}
`
	sent, err := loadgen.ReadRecord(strings.NewReader(record))
	if err != nil {
		t.Fatal(err)
	}
	if !demo.Accounted(sent, l, 0, brokers) {
		t.Fatal("not accounted for: the request without a trace, never acknowledged, was waited for")
	}
	sum, err := demo.Verify(sent, l, brokers)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.OK() || sum.Lost != 0 || sum.Unconfirmed != 2 || sum.UnconfirmedArrived != 1 || sum.Completed != 2 || sum.Deliverable != 2 ||
		!strings.Contains(sum.String(), "unconfirmed 2") {
		t.Fatalf("%s\nwant a PASS: 2 completed of 2 deliverable, 2 unconfirmed, 1 of them arrived", sum)
	}
}

// A deliverable request compensated fails the verification unless its
// compensation event says a service refused it for good
// (delivery.HeaderCause): a deadline, parkings run out or a transient
// failure mean it could have completed. Before, a run on a starved machine
// that cancelled 449 deliverable requests said "verification PASS". Each
// request counts once, whatever the calls refused (found in review: a
// count of refused calls let throttled calls, and the lookups and undos of
// one refused request, excuse other compensations).
func TestVerifyFailsOnDeliverableRequestsCompensatedForNothing(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters", "delivery-failures")
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	for _, id := range []string{"d-00000001", "d-00000002", "d-00000003"} {
		if err := b.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Deliveries.Put(ctx, "d-00000001", delivery.Progress{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d-00000002", "d-00000003"} { // compensated
		if err := b.Packages.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	event := func(id, cause string) *kgo.Record {
		return &kgo.Record{Topic: "delivery-failures", Key: []byte(id), Value: []byte(`{"id":"` + id + `"}`),
			Headers: []kgo.RecordHeader{{Key: delivery.HeaderCause, Value: []byte(cause)}}}
	}
	// d-2 gave up on its deadline; d-3 was refused (and, as a duplicate,
	// gave up on its deadline too).
	if err := producer.ProduceSync(ctx, event("d-00000002", delivery.CauseDeadline), event("d-00000003", delivery.CauseDeadline),
		event("d-00000003", delivery.CauseRefused)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	sent := deliverables(t, "d-00000001", "d-00000002", "d-00000003")
	sum, err := demo.Verify(sent, l, brokers)
	if err != nil {
		t.Fatal(err)
	}
	if sum.OK() || sum.Needless != 1 || !strings.Contains(sum.String(), "verification FAIL") {
		t.Fatalf("d-00000002 compensated for its deadline: %s; want a FAIL counting it alone", sum)
	}
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	remote, accounted, err := demo.VerifyRemote(ctx, srv.Client(), srv.URL, sent, brokers, true)
	if err != nil || !accounted || remote.OK() || remote.Needless != 1 {
		t.Fatalf("verified remotely: %v (accounted %v, err %v); want the same FAIL", remote, accounted, err)
	}
}

// A request counted completed (its delivery live) must have its package
// and its drone: one without is a workflow that skipped a step, which the
// verification reports. Found by a new user: the recipe run twice on the
// same Redis, whose step records of the first run said every drone step
// of the second (the same ids again) was done, completed 4,914 requests
// with no drone booked and verified PASS.
func TestVerifyFailsOnACompletedRequestWithoutItsDrone(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters", "delivery-failures")
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	for _, id := range []string{"d-00000001", "d-00000002"} {
		if err := b.Packages.Put(ctx, id, r); err != nil {
			t.Fatal(err)
		}
		if err := b.Deliveries.Put(ctx, id, delivery.Progress{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Drones.Schedule(ctx, "d-00000001", r.Pickup); err != nil {
		t.Fatal(err)
	}
	sent := deliverables(t, "d-00000001", "d-00000002")
	sum, err := demo.Verify(sent, l, brokers)
	if err != nil {
		t.Fatal(err)
	}
	if sum.OK() || sum.Incomplete != 1 || !strings.Contains(sum.String(), "completed without their package or drone 1") {
		t.Fatalf("d-00000002 completed with no drone: %s; want a FAIL counting it", sum)
	}
}

// deliverables is the load generator's record of the deliverable requests
// ids, each sent once and acknowledged.
func deliverables(t *testing.T, ids ...string) *loadgen.Sent {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"format":"sluice-loadgen-record","version":1,"sent":%d,"duplicates":0,"requests":%d}`+"\n", len(ids), len(ids))
	for _, id := range ids {
		fmt.Fprintf(&b, `{"id":%q,"kind":"deliverable"}`+"\n", id)
	}
	sent, err := loadgen.ReadRecord(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return sent
}

// askedView counts the questions about single requests, which a remote
// ledger answers by downloading itself whole.
type askedView struct {
	demo.LedgerView
	asked int
}

func (v *askedView) Live(service, id string) bool { v.asked++; return v.LedgerView.Live(service, id) }
func (v *askedView) Undone(service, id string) bool {
	v.asked++
	return v.LedgerView.Undone(service, id)
}

// With services that hold the outcomes of earlier loads, Accounted still
// tells from the counts alone that a load's outcomes are not all in yet,
// given how many outcomes there were when the load began: it asks about
// no single request until this load's outcomes could be complete.
func TestAccountedCountsOnlyThisLoadsOutcomes(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.SimulatedNonIdempotent(delivery.SimConfig{}, l, loadgen.SuspendedOwner)
	put := func(id string) {
		t.Helper()
		if err := b.Deliveries.Put(ctx, id, delivery.Progress{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // an earlier load's outcomes
		put(fmt.Sprintf("e-%08d", i))
	}
	sent, err := loadgen.ReadRecord(strings.NewReader(`{"format":"sluice-loadgen-record","version":1,"sent":3,"duplicates":0,"requests":3}
{"id":"d-00000001","kind":"deliverable"}
{"id":"d-00000002","kind":"deliverable"}
{"id":"d-00000003","kind":"deliverable"}
`))
	if err != nil {
		t.Fatal(err)
	}
	before := demo.OutcomesBefore(20)
	view := &askedView{LedgerView: l.Snapshot()}
	if demo.Accounted(sent, view, 0, nil, before) || view.asked != 0 {
		t.Fatalf("none of the load's 3 outcomes in: accounted, or %d questions about single requests; want neither", view.asked)
	}
	put("d-00000001")
	put("d-00000002")
	view = &askedView{LedgerView: l.Snapshot()}
	if demo.Accounted(sent, view, 0, nil, before) || view.asked != 0 {
		t.Fatalf("2 of 3 outcomes in: accounted, or %d questions about single requests; want neither", view.asked)
	}
	put("d-00000003")
	view = &askedView{LedgerView: l.Snapshot()}
	if !demo.Accounted(sent, view, 0, nil, before) {
		t.Fatal("every outcome in: not accounted")
	}
}

package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// TestSeparateCommandsVerifyARun runs the whole system from its commands,
// as docs/operating.md shows it on one machine, as pieces of one process: a
// broker on loopback, `sluice services` with faults at every service and
// drones that book on every call, the scheduler (with step records in a
// real redis-server) and the supervisor calling those services over HTTP,
// and `sluice loadgen -record`; then `sluice verify` checks the run from
// the record, the services' ledger and the dead letters, and must count
// exactly what the load generator sent, with side effects in the
// services' ledger (a loaded machine may time out most calls: how many
// complete is not the point here), and measure the latency of each that
// completed.
func TestSeparateCommandsVerifyARun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the commands as processes through a load: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "delivery-requests", "delivery-failures",
		"delivery-requests-retry", "delivery-failures-retry"), kfake.SeedTopics(1, "delivery-dead-letters", "delivery-compensation-dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	redisAddr := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listening := make(chan [2]string, 3)
	onListen = func(which, addr string) { listening <- [2]string{which, addr} }
	defer func() { onListen = nil }()
	done := make(chan error, 3)
	awaitListen := func(which string) string {
		t.Helper()
		select {
		case l := <-listening:
			if l[0] != which {
				t.Fatalf("%s started while waiting for %s", l[0], which)
			}
			return l[1]
		case err := <-done:
			t.Fatalf("a command ended while waiting for %s: %v", which, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not start within 30 s", which)
		}
		return ""
	}
	go func() {
		done <- runServices(ctx, []string{"-listen", "127.0.0.1:0", "-transient", "0.05", "-throttle", "0.01", "-permanent", "0.005",
			"-min-latency", "1ms", "-max-latency", "5ms"})
	}()
	services := "http://" + awaitListen("services")
	for _, which := range []string{"delivery", "supervisor"} {
		args := []string{which, "-brokers", brokers, "-backends", services, "-listen", "127.0.0.1:0"}
		if which == "delivery" {
			args = append(args, "-redis", redisAddr)
		}
		go func() { done <- runWorker(ctx, args) }()
		awaitListen(which)
	}
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	sent, err := loadgenCmd(ctx, []string{"-brokers", brokers, "-rate", "300", "-burst", "0", "-duration", "2s", "-record", record})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := verifyCmd(ctx, []string{"-record", record, "-services", services, "-brokers", brokers, "-wait", "60s"})
	if err != nil {
		t.Fatalf("%v: %s", err, sum)
	}
	kinds, dups := sent.Kinds()
	expectedDead := 0
	for _, k := range kinds {
		if k == loadgen.Malformed || k == loadgen.Invalid {
			expectedDead++
		}
	}
	outcomes := sum.Completed + sum.Compensated
	for _, n := range sum.DeadLettered {
		outcomes += n
	}
	if !sum.OK() || sum.Sent != int(sent.Total()) || sum.Duplicates != dups || outcomes != len(kinds) ||
		sum.ExpectedDead != expectedDead || sum.Completed+sum.Compensated == 0 {
		t.Fatalf("%s\nwant what the load generator sent: %d (%d duplicates), %d distinct, %d of them bad input",
			sum, sent.Total(), dups, len(kinds), expectedDead)
	}
	// Every completed request's latency is measured from the record and
	// the ledger, those the services throttled apart, and the verdict
	// shows it.
	if sum.NeverThrottled.N+sum.Throttled.N != sum.Completed || sum.NeverThrottled.P99 <= 0 ||
		!strings.Contains(sum.String(), "p99 never throttled") {
		t.Fatalf("%s\nwant the latency of every one of the %d completed requests, %d never throttled and %d throttled",
			sum, sum.Completed, sum.NeverThrottled.N, sum.Throttled.N)
	}
	cancel()
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a command did not stop within 30 s of its signal")
		}
	}
}

// verify fails a run that broke a promise, and says what it counted: here
// a drone booked twice for one request and a request with no outcome.
func TestVerifyFailsABrokenRun(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters")
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.SimulatedNonIdempotent(delivery.SimConfig{}, l, nil)
	r := delivery.Request{Pickup: delivery.Location{Lat: 47.6, Lon: -122.3}}
	if err := b.Packages.Put(ctx, "d-00000000", r); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.Drones.Schedule(ctx, "d-00000000", r.Pickup); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Deliveries.Put(ctx, "d-00000000", delivery.Progress{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if err := os.WriteFile(record, []byte(`{"format":"sluice-loadgen-record","version":1,"sent":2,"duplicates":0,"requests":2}
{"id":"d-00000000","kind":"deliverable"}
{"id":"d-00000001","kind":"deliverable"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := verifyCmd(ctx, []string{"-record", record, "-services", srv.URL, "-brokers", strings.Join(brokers, ","), "-wait", "0"})
	if err == nil || sum.OK() || sum.Twice != 1 || sum.Lost != 1 || !strings.Contains(sum.String(), "verification FAIL") {
		t.Fatalf("a drone booked twice and a request lost: %v, %s", err, sum)
	}
}

// Bad flags stop verify before it reads anything, each error naming its
// flag.
func TestVerifyFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-services", "http://127.0.0.1:1"}, "-record"},
		{[]string{"-record", filepath.Join(dir, "none.jsonl")}, "-record"},
		{[]string{"-record", "x", "-services", "127.0.0.1:8080"}, "-services"},
	} {
		if err := runVerify(context.Background(), c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// verify reads the dead-letter topics a deployment names: flags, or the
// workers' own variables, so that one environment configures both.
func TestVerifyReadsTheDeploymentsTopics(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "acme-dead-letters", "acme-compensation-dead-letters")
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	rec := &kgo.Record{Topic: "acme-dead-letters", Key: []byte("malformed-1"),
		Headers: []kgo.RecordHeader{{Key: kafkasink.HeaderReason, Value: []byte("malformed delivery request")}}}
	if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(delivery.LedgerHandler(delivery.NewLedger()))
	defer srv.Close()
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	if err := os.WriteFile(record, []byte(`{"format":"sluice-loadgen-record","version":2,"sent":1,"duplicates":0,"requests":1,"unconfirmed":0}
{"id":"malformed-1","kind":"malformed"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-record", record, "-services", srv.URL, "-brokers", brokers[0], "-wait", "0"}
	check := func(how string, args []string) {
		t.Helper()
		sum, err := verifyCmd(context.Background(), args)
		if err != nil || !sum.OK() || sum.DeadLettered["malformed"] != 1 {
			t.Fatalf("%s: %v, %s; want the dead letter found on acme-dead-letters", how, err, sum)
		}
	}
	check("flags", append(args, "-dead-letter-topic", "acme-dead-letters", "-supervisor-dead-letter-topic", "acme-compensation-dead-letters"))
	t.Setenv("SLUICE_DEAD_LETTER_TOPIC", "acme-dead-letters")
	t.Setenv("SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC", "acme-compensation-dead-letters")
	check("the workers' variables", args)
}

package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/deployment"
)

// TestDeployedSystemLevelsLoad runs the system as it is deployed, every
// part a process of its own — sluice broker, sluice services (5% transient
// failures, 1% throttled), a real redis-server for the drone step's
// records (drones booked on every call: mode b), the two workers — and
// sends more than this machine can process at once while the scheduler is
// killed twice (SIGKILL) and Redis is down for 5 s. Overload must become
// lag, not cancellations: at least 99.5% of the deliverable requests
// complete (the services refuse none here, so every one could), nothing
// is lost, no drone is booked twice, nothing is left after a compensation,
// no valid request is dead-lettered, and the scheduler rides out the
// outage without exiting. Then requests that were delivered are sent
// again, as a client's retry or a replay would: they must leave no second
// outcome and no second side effect.
func TestDeployedSystemLevelsLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the deployed system, every part a process: make test runs it, -short does not")
	}
	deployedLevelsLoad(t, "")
}

// TestDeployedSystemOnRedisStreams is TestDeployedSystemLevelsLoad with the
// topics on the Redis streams of the same names (-transport redis): no
// broker, the workers in consumer groups on the redis-server that also
// keeps the step records. Redis down for 5 s is then the whole transport
// down: the workers and the load generator wait for it and go on.
func TestDeployedSystemOnRedisStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the deployed system on Redis streams, every part a process: make test runs it, -short does not")
	}
	deployedLevelsLoad(t, deployed.TransportRedis)
}

// deployedLevelsLoad runs TestDeployedSystemLevelsLoad with the topics on
// transport ("": Kafka).
func deployedLevelsLoad(t *testing.T, transport string) {
	s := deployment.Start(t, deployed.Build(t), deployed.Config{
		Partitions: 8,
		Services: []string{"-min-latency", "1ms", "-max-latency", "5ms", "-transient", "0.05", "-throttle", "0.01",
			"-retry-after", "20ms", "-permanent", "0"},
		Worker:    []string{"-replay-after", "200ms", "-max-replay-delay", "2s"},
		Delivery:  []string{"-stale-after", "4s"},
		Transport: transport,
	})
	ctx := context.Background()
	events := make(chan string, 8)
	go func() {
		defer close(events)
		kill := func() {
			s.Worker("delivery").Stop(syscall.SIGKILL)
			s.StartWorker("delivery")
			events <- "scheduler killed and restarted"
		}
		time.Sleep(1500 * time.Millisecond)
		kill()
		s.Redis.Stop()
		time.Sleep(5 * time.Second)
		if !s.Worker("delivery").Alive() {
			events <- "FAIL: the scheduler exited while Redis was down"
		}
		s.Redis.Start()
		events <- "Redis down for 5 s"
		time.Sleep(time.Second)
		kill()
	}()
	sent, err := s.Load(ctx, "-rate", "2000", "-burst", "0", "-duration", "10s")
	if err != nil {
		t.Fatal(err)
	}
	for e := range events {
		t.Log(e)
		if e[:4] == "FAIL" {
			t.Error(e[6:])
		}
	}
	sum, took, err := s.Settle(ctx, sent, 3*time.Minute)
	t.Logf("settled %v after the load: %s", took.Round(100*time.Millisecond), sum)
	if err != nil {
		t.Fatal(err)
	}
	if share := float64(sum.Completed) / float64(sum.Deliverable); share < 0.995 || !sum.OK() || sum.Lost != 0 || sum.Twice != 0 ||
		sum.LeftoverAfterUndo != 0 || sum.ValidDeadLettered != 0 || sum.TwoOutcomes != 0 {
		t.Fatalf("%.2f%% of the deliverable requests completed, want at least 99.5%% and nothing lost, twice, left or "+
			"dead-lettered: %s", 100*share, sum)
	}
	if !s.Worker("delivery").Alive() {
		t.Fatal("the scheduler exited on its own")
	}

	// Delivered requests again: every copy is served from the step
	// records and the services' state, none books a drone or reports a
	// failure.
	recs, err := s.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := delivery.FetchLedger(ctx, http.DefaultClient, s.Services)
	if err != nil {
		t.Fatal(err)
	}
	var again []*kgo.Record
	for _, r := range recs {
		var req delivery.Request
		if json.Unmarshal(r.Value, &req) != nil || !ledger.Live("deliveries", req.ID) {
			continue
		}
		again = append(again, &kgo.Record{Topic: deployed.RequestsTopic, Key: r.Key, Value: r.Value})
		if len(again) == 50 {
			break
		}
	}
	if len(again) < 50 {
		t.Fatalf("only %d delivered requests found to send again", len(again))
	}
	if err := s.Produce(ctx, again...); err != nil {
		t.Fatal(err)
	}
	// Every group of both workers caught up (a copy parked and replayed,
	// a compensation) and staying so for longer than a replay's delay.
	quiet := time.Time{}
	for deadline := time.Now().Add(time.Minute); time.Since(quiet) < 3*time.Second || quiet.IsZero(); time.Sleep(200 * time.Millisecond) {
		if lag, err := s.LagAll(ctx); err != nil || lag != 0 {
			quiet = time.Time{}
		} else if quiet.IsZero() {
			quiet = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatal("the workers did not catch up with the requests sent again within a minute")
		}
	}
	after, _, err := s.Settle(ctx, sent, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if after.Completed != sum.Completed || after.Twice != 0 || after.TwoOutcomes != 0 || after.ValidDeadLettered != 0 {
		t.Fatalf("after sending %d delivered requests again: %s\nbefore: %s", len(again), after, sum)
	}
	if ledger2, err := delivery.FetchLedgerTotals(ctx, http.DefaultClient, s.Services); err != nil || ledger2.Twice() != 0 {
		t.Fatalf("side effects created twice after the requests sent again: %+v (%v)", ledger2, err)
	}
}

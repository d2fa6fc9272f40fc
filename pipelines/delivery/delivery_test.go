package delivery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/stream"
)

func valid() delivery.Request {
	return delivery.Request{ID: "d-1", Owner: "acct-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 2, Deadline: time.Now().Add(time.Hour)}
}

func TestParseAndValidate(t *testing.T) {
	if _, err := delivery.Parse([]byte(`{"id": "x`)); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("malformed: %v", err)
	}
	if err := valid().Validate(); err != nil {
		t.Fatal(err)
	}
	// Without a deadline a request is valid: it gets the scheduler's
	// DefaultHorizon should a service fail it.
	noDeadline := valid()
	noDeadline.Deadline = time.Time{}
	if err := noDeadline.Validate(); err != nil {
		t.Fatalf("a request without a deadline: %v", err)
	}
	for field, mut := range map[string]func(*delivery.Request){
		"id":        func(r *delivery.Request) { r.ID = "" },
		"owner":     func(r *delivery.Request) { r.Owner = "" },
		"pickup":    func(r *delivery.Request) { r.Pickup.Lat = 100 },
		"weight":    func(r *delivery.Request) { r.WeightKg = 80 },
		"size":      func(r *delivery.Request) { r.Size = "huge" },
		"priority":  func(r *delivery.Request) { r.Priority = delivery.Prio(7) },
		"id is":     func(r *delivery.Request) { r.ID = strings.Repeat("i", delivery.MaxIDLen+1) },
		"owner is":  func(r *delivery.Request) { r.Owner = strings.Repeat("o", delivery.MaxIDLen+1) },
		`id ".."`:   func(r *delivery.Request) { r.ID = ".." },
		`owner "."`: func(r *delivery.Request) { r.Owner = "." },
	} {
		r := valid()
		mut(&r)
		err := r.Validate()
		if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

func TestSimulatedServicesAreIdempotent(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, func(o string) bool { return o == "bad" })
	r := valid()
	for range 3 { // a replayed request creates nothing new
		if err := b.Packages.Put(ctx, r.ID, r); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Drones.Schedule(ctx, r.ID, r.Pickup); err != nil {
			t.Fatal(err)
		}
	}
	if l.Created("packages", r.ID) != 1 || l.Created("drones", r.ID) != 1 || l.Twice() != 0 {
		t.Fatalf("created packages %d drones %d", l.Created("packages", r.ID), l.Created("drones", r.ID))
	}
	if _, err := b.Accounts.Check(ctx, "bad"); !errors.Is(err, delivery.ErrSuspended) || stream.Classify(err).Transient {
		t.Fatalf("suspended account: %v (must be permanent)", err)
	}
	far := delivery.Location{Lat: 78.2, Lon: 15.6}
	if _, err := b.Drones.Schedule(ctx, "d-2", far); !errors.Is(err, delivery.ErrNoDrone) || stream.Classify(err).Transient {
		t.Fatalf("no drone base: %v (must be permanent)", err)
	}
	if need, _ := b.ThirdParty.Needed(ctx, delivery.Request{Pickup: r.Pickup, Dropoff: delivery.Location{Lat: 48.5, Lon: -122.3}}); !need {
		t.Fatal("100 km should need a third-party carrier")
	}
}

func TestSimulatedFaultsAreTransient(t *testing.T) {
	b := delivery.Simulated(delivery.SimConfig{TransientRate: 1}, delivery.NewLedger(), nil)
	err := b.Packages.Put(context.Background(), "d-1", valid())
	if c := stream.Classify(err); !c.Transient {
		t.Fatalf("%v classified %+v", err, c)
	}
	b = delivery.Simulated(delivery.SimConfig{ThrottleRate: 1, RetryAfter: time.Second}, delivery.NewLedger(), nil)
	err = b.Packages.Put(context.Background(), "d-1", valid())
	if c := stream.Classify(err); c.Reason != stream.ReasonThrottled || c.RetryAfter != time.Second {
		t.Fatalf("%v classified %+v", err, c)
	}
}

func TestSimulatedPermanentFaults(t *testing.T) {
	b := delivery.Simulated(delivery.SimConfig{PermanentRate: 1}, delivery.NewLedger(), nil)
	_, err := b.Drones.Schedule(context.Background(), "d-1", valid().Pickup)
	if !errors.Is(err, delivery.ErrRejected) || stream.Classify(err).Transient {
		t.Fatalf("%v: want a permanent ErrRejected", err)
	}
	// Undo operations are never rejected: a compensation can finish.
	if err := b.Drones.Cancel(context.Background(), "d-1"); err != nil {
		t.Fatalf("undo rejected: %v", err)
	}
}

func TestCompensatedDeliveriesStayCancelled(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	r := valid()
	if err := b.Packages.Put(ctx, r.ID, r); err != nil {
		t.Fatal(err)
	}
	if err := b.Packages.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	// A late retry, or a duplicate of the compensated request, must not
	// bring the package back.
	err := b.Packages.Put(ctx, r.ID, r)
	if !errors.Is(err, delivery.ErrCancelled) || stream.Classify(err).Transient || l.Live("packages", r.ID) {
		t.Fatalf("put after undo: %v", err)
	}
}

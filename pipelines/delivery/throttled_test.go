package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/stream"
)

// Every call a simulated service answers "slow down" (429) counts against
// the delivery it was made for, in the ledger: the calls keyed by
// delivery id, the accounts check (keyed by owner) when it names its
// delivery, and over HTTP as in process. A ledger downloaded says the same.
// A check that names no delivery counts against none.
func TestThrottledCallsCountAgainstTheirDelivery(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	cfg := delivery.SimConfig{ThrottleRate: 1, RetryAfter: 20 * time.Millisecond}
	sim := delivery.Simulated(cfg, l, nil)
	mux := http.NewServeMux()
	mux.Handle("/", delivery.HTTPHandler(sim))
	mux.Handle("/ledger", delivery.LedgerHandler(l))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := valid()
	for name, b := range map[string]delivery.Backends{"in process": sim, "over HTTP": delivery.HTTPBackends(srv.URL, delivery.NewHTTPClient(4))} {
		before := l.Throttled(r.ID)
		calls := []error{
			func() error { _, err := b.Accounts.Check(delivery.ForDelivery(ctx, r.ID), r.Owner); return err }(),
			b.Packages.Put(ctx, r.ID, r),
			func() error { _, err := b.ThirdParty.Needed(ctx, r); return err }(),
			func() error { _, err := b.Drones.Schedule(ctx, r.ID, r.Pickup); return err }(),
			b.Deliveries.Put(ctx, r.ID, delivery.Progress{Request: r}),
			b.Deliveries.Delete(ctx, r.ID),
		}
		for i, err := range calls {
			if c := stream.Classify(err); c.Reason != stream.ReasonThrottled {
				t.Fatalf("%s: call %d answered %v, want throttled", name, i, err)
			}
		}
		if got := l.Throttled(r.ID) - before; got != len(calls) {
			t.Errorf("%s: %d calls throttled, the ledger counts %d", name, len(calls), got)
		}
		if _, err := b.Accounts.Check(ctx, "someone"); stream.Classify(err).Reason != stream.ReasonThrottled {
			t.Fatalf("%s: a check for no delivery answered %v, want throttled", name, err)
		}
	}
	if l.Throttled("d-none") != 0 || l.Totals().IDs != 1 || l.Live("packages", r.ID) {
		t.Errorf("the ledger holds %d ids, %d throttles of d-none, a package live %v: want only %s's throttles",
			l.Totals().IDs, l.Throttled("d-none"), l.Live("packages", r.ID), r.ID)
	}
	if got := l.Record(r.ID).Throttled; got != 12 {
		t.Errorf("the record of %s says %d throttled calls, want 12", r.ID, got)
	}
	snap, err := delivery.FetchLedger(ctx, srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Throttled(r.ID) != 12 || snap.Throttled("d-none") != 0 {
		t.Errorf("downloaded: %d throttled calls of %s, want 12", snap.Throttled(r.ID), r.ID)
	}
}

// The ledger says when each record was first created, and a downloaded
// one says the same: the deliveries service's is when the request
// completed.
func TestLedgerSaysWhenARecordWasCreated(t *testing.T) {
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	r := valid()
	if !l.CreatedAt("deliveries", r.ID).IsZero() {
		t.Fatal("a record never created has a creation time")
	}
	if err := b.Deliveries.Put(ctx, r.ID, delivery.Progress{Request: r}); err != nil {
		t.Fatal(err)
	}
	first := l.CreatedAt("deliveries", r.ID)
	if first.IsZero() {
		t.Fatal("a created record has no creation time")
	}
	if err := b.Deliveries.Put(ctx, r.ID, delivery.Progress{Request: r}); err != nil {
		t.Fatal(err)
	}
	if !l.CreatedAt("deliveries", r.ID).Equal(first) {
		t.Errorf("a second PUT moved the creation time from %v to %v", first, l.CreatedAt("deliveries", r.ID))
	}
	snap, err := delivery.FetchLedger(ctx, srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.CreatedAt("deliveries", r.ID); !got.Equal(first) || !snap.CreatedAt("packages", r.ID).IsZero() {
		t.Errorf("downloaded: created at %v (packages %v), want %v (and never)", got, snap.CreatedAt("packages", r.ID), first)
	}
}

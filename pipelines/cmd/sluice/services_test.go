package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// startServices runs `sluice services` with args on a loopback port and
// returns its base URL; the services stop when the test ends.
func startServices(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	onListen = func(which, addr string) {
		if which == "services" {
			addrs <- addr
		}
	}
	done := make(chan error, 1)
	go func() { done <- runServices(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("services: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the services did not stop within 30 s")
		}
	})
	defer func() { onListen = nil }()
	select {
	case addr := <-addrs:
		return "http://" + addr
	case err := <-done:
		t.Fatalf("services ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the services did not start within 30 s")
	}
	return ""
}

// sluice services serves the backends and, beside them, their ledger:
// non-idempotent drones by default (every call books), idempotent ones
// with -drones idempotent.
func TestServicesServeBackendsAndLedger(t *testing.T) {
	ctx := context.Background()
	cl := &http.Client{Timeout: 10 * time.Second}
	for drones, twice := range map[string]int{"": 1, "idempotent": 0} {
		args := []string{"-transient", "0", "-throttle", "0"}
		if drones != "" {
			args = append(args, "-drones", drones)
		}
		base := startServices(t, args...)
		b := delivery.HTTPBackends(base, cl)
		pickup := delivery.Location{Lat: 47.6, Lon: -122.3}
		for range 2 {
			if _, err := b.Drones.Schedule(ctx, "d-1", pickup); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Packages.Put(ctx, "d-1", delivery.Request{}); err != nil {
			t.Fatal(err)
		}
		if err := b.Packages.Delete(ctx, "d-1"); err != nil {
			t.Fatal(err)
		}
		totals, err := delivery.FetchLedgerTotals(ctx, cl, base)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := delivery.FetchLedgerRecord(ctx, cl, base, "d-1")
		if err != nil {
			t.Fatal(err)
		}
		wantRec := delivery.LedgerRecord{ID: "d-1", Packages: delivery.LedgerEntry{Created: 1, Undone: true},
			Drones: delivery.LedgerEntry{Created: 1 + twice, Live: true}}
		if totals.IDs != 1 || totals.Twice() != twice || totals.UndoneCount("packages") != 1 || rec != wantRec {
			t.Errorf("-drones %q: totals %+v, d-1 %+v; want %d created twice and d-1 %+v", drones, totals, rec, twice, wantRec)
		}
	}
}

// Bad flags stop the services before they serve, each error naming its
// flag.
func TestServicesFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-drones", "sometimes"}, "-drones"},
		{[]string{"-transient", "0.6", "-permanent", "0.6"}, "-permanent"},
		{[]string{"-min-latency", "10ms", "-max-latency", "1ms"}, "-max-latency"},
		{[]string{"-listen", "127.0.0.1:-1"}, "-listen"},
	} {
		if err := runServices(context.Background(), c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

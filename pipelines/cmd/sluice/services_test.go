package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// startServices runs `sluice services` with args on a loopback port and
// returns the base URLs of the services and of their admin address; the
// services stop when the test ends.
func startServices(t *testing.T, args ...string) (base, admin string) {
	t.Helper()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	admin = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	args = append([]string{"-listen", "127.0.0.1:0", "-admin-listen", admin[len("http://"):]}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	onListen = func(which, addr string) {
		if which == "services" {
			addrs <- addr
		}
	}
	done := make(chan error, 1)
	go func() { done <- runServices(ctx, args) }()
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
		return "http://" + addr, admin
	case err := <-done:
		t.Fatalf("services ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the services did not start within 30 s")
	}
	return "", ""
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
		base, _ := startServices(t, args...)
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
		// The package's undo says when it was applied.
		if at := rec.Packages.UndoneAt; at == nil || time.Since(*at) > time.Minute || time.Since(*at) < 0 {
			t.Errorf("-drones %q: d-1's package undone at %v, want the time of its undo", drones, at)
		}
		rec.Packages.UndoneAt = nil
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
		{[]string{"-admin-listen", "127.0.0.1:-1"}, "-admin-listen"},
		{[]string{"-admin-listen", ""}, "-admin-listen"},
		{[]string{"-fault", "drones:status=500", "-fault", "drones:staus=500:for=30s"}, `-fault: fault "drones:staus=500:for=30s": "staus=500": want status=N`},
		{[]string{"-fault", "drones:down:for=1m"}, "want all:down, not drones:down"},
		{[]string{"-fault", "all:latency=+300ms:after=10s:for=-30s"}, "for=-30s"},
	} {
		if err := runServices(context.Background(), c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// Faults started on the admin address apply at once: the drone service
// answers 500 to every call, undos included, while the others serve; the
// services go down (their address refuses connections) while the ledger
// stays readable on the admin address; clearing the faults brings them
// back on the same address.
func TestServicesFaultsOnDemand(t *testing.T) {
	ctx := context.Background()
	cl := &http.Client{Timeout: 10 * time.Second}
	base, admin := startServices(t, "-transient", "0", "-throttle", "0")
	b := delivery.HTTPBackends(base, cl)
	pickup := delivery.Location{Lat: 47.6, Lon: -122.3}
	status := func(err error) int {
		var he *flow.HTTPError
		if errors.As(err, &he) {
			return he.Status
		}
		return 0
	}
	if _, err := delivery.StartFault(ctx, cl, admin, delivery.Fault{Service: "drones", Status: 500}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Drones.Schedule(ctx, "d-1", pickup); status(err) != 500 {
		t.Fatalf("booking a drone with the drone service failing: %v, want a 500", err)
	}
	if err := b.Drones.Cancel(ctx, "d-1"); status(err) != 500 {
		t.Fatalf("cancelling a drone with the drone service failing: %v, want a 500", err)
	}
	if err := b.Packages.Put(ctx, "d-1", delivery.Request{}); err != nil {
		t.Fatalf("the package service, not failing: %v", err)
	}

	if _, err := delivery.StartFault(ctx, cl, admin, delivery.Fault{Service: "all", Down: true}); err != nil {
		t.Fatal(err)
	}
	// The client's pooled connection was closed: its next call fails
	// unanswered (EOF if the client had not yet seen the close).
	if err := b.Packages.Delete(ctx, "d-1"); err == nil || status(err) != 0 {
		t.Fatalf("an undo while the services are down: %v, want no answer", err)
	}
	fresh := delivery.HTTPBackends(base, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}})
	if err := fresh.Packages.Delete(ctx, "d-1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("an undo on a new connection while the services are down: %v, want the connection refused", err)
	}
	if _, err := net.DialTimeout("tcp", base[len("http://"):], 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialling the services while down: %v, want the connection refused", err)
	}
	totals, err := delivery.FetchLedgerTotals(ctx, cl, admin)
	if err != nil || totals.IDs != 1 || totals.LiveCount("packages") != 1 || totals.LiveCount("drones") != 0 {
		t.Fatalf("the ledger on the admin address while the services are down: %+v, %v; want d-1's package and no drone", totals, err)
	}
	faults, err := delivery.FetchFaults(ctx, cl, admin)
	if err != nil || len(faults) != 2 || faults[0].State != "active" || faults[1].Spec != "all:down" || faults[1].State != "active" {
		t.Fatalf("faults listed: %+v, %v", faults, err)
	}

	if n, err := delivery.ClearFaults(ctx, cl, admin); err != nil || n != 2 {
		t.Fatalf("clearing the faults: %d, %v; want 2 cleared", n, err)
	}
	if err := b.Packages.Delete(ctx, "d-1"); err != nil {
		t.Fatalf("an undo once the services are back: %v", err)
	}
	if _, err := b.Drones.Schedule(ctx, "d-2", pickup); err != nil {
		t.Fatalf("booking a drone once the faults are cleared: %v", err)
	}
	totals, err = delivery.FetchLedgerTotals(ctx, cl, base)
	if err != nil || totals.UndoneCount("packages") != 1 || totals.LiveCount("drones") != 1 || totals.LastUndo == nil {
		t.Fatalf("the ledger on the services' address once back: %+v, %v", totals, err)
	}
}

// A fault given as a flag applies from the start, as listed on the admin
// address.
func TestServicesFaultFlag(t *testing.T) {
	ctx := context.Background()
	cl := &http.Client{Timeout: 10 * time.Second}
	base, admin := startServices(t, "-transient", "0", "-throttle", "0", "-fault", "deliveries:status=503,packages:latency=+1ms")
	b := delivery.HTTPBackends(base, cl)
	var he *flow.HTTPError
	if _, err := b.Deliveries.State(ctx, "d-1"); !errors.As(err, &he) || he.Status != 503 || !strings.Contains(he.Body, "deliveries") {
		t.Fatalf("the deliveries service with -fault deliveries:status=503: %v", err)
	}
	faults, err := delivery.FetchFaults(ctx, cl, admin)
	if err != nil || len(faults) != 2 || faults[0].Spec != "deliveries:status=503" || faults[0].State != "active" ||
		faults[1].Spec != "packages:latency=+1ms" {
		t.Fatalf("faults listed: %+v, %v", faults, err)
	}
}

// -fault is repeatable, its variable may hold several faults separated by
// commas, and the command line replaces the variable's.
func TestServicesFaultFlagRepeats(t *testing.T) {
	specs := func(args ...string) []string {
		t.Helper()
		fs, _ := parsedFlags(t, append([]string{"services"}, args...))
		return fs.Lookup("fault").Value.(*faultFlags).specs
	}
	if got, want := specs("-fault", "drones:status=500", "-fault", "all:down:for=1m,all:latency=+5ms"),
		[]string{"drones:status=500", "all:down:for=1m", "all:latency=+5ms"}; !slices.Equal(got, want) {
		t.Errorf("from the command line: %q, want %q", got, want)
	}
	t.Setenv("SLUICE_SERVICES_FAULT", "drones:status=500, accounts:status=502")
	if got, want := specs(), []string{"drones:status=500", "accounts:status=502"}; !slices.Equal(got, want) {
		t.Errorf("from the variable: %q, want %q", got, want)
	}
	if got, want := specs("-fault", "all:down:for=1m", "-fault", "packages:status=500"),
		[]string{"all:down:for=1m", "packages:status=500"}; !slices.Equal(got, want) {
		t.Errorf("with the variable and the command line: %q, want %q", got, want)
	}
}

// A fault started or cleared through /admin/faults is printed where the
// services print their state, so an operator reading the output sees why
// the services began to fail; a refused one is printed with its reason.
func TestServicesPrintFaultChanges(t *testing.T) {
	var out bytes.Buffer
	h := printFaultChanges(delivery.FaultsHandler(delivery.NewFaultSet(nil)), &out)
	for _, req := range []struct{ method, body string }{
		{"POST", `{"service":"drones","status":500,"for":"30s"}`},
		{"POST", `{"service":"drone","status":500}`},
		{"GET", ""},
		{"DELETE", ""},
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, "/admin/faults", strings.NewReader(req.body)))
	}
	got := out.String()
	for _, want := range []string{"fault started: drones:status=500:for=30s", `fault refused: fault drone:status=500: service "drone"`, "faults cleared: 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("printed %q, want a line with %q", got, want)
		}
	}
	if n := strings.Count(got, "\n"); n != 3 {
		t.Errorf("printed %d lines, want 3 (a GET changes nothing):\n%s", n, got)
	}
}

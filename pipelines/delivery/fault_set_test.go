package delivery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// call sends one call to h and returns its status and how long it took.
// A call whose connection h closes unanswered is status 0.
func call(t *testing.T, h http.Handler, method, path, body string) (status int, took time.Duration) {
	t.Helper()
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler {
				panic(r)
			}
			status, took = 0, time.Since(start)
		}
	}()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w.Code, time.Since(start)
}

const pickup = `{"lat": 47.6, "lon": -122.3}`

// Faults given at the services' start follow their schedule: the drone
// service answers 500 from 10 s to 40 s, its undos included, and does
// nothing for those calls; every service takes 300 ms more from 20 s to
// 30 s; before, between and after, the calls are served as usual.
func TestFaultScheduleStatusAndLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ledger := delivery.NewLedger()
		faults := delivery.NewFaultSet(nil)
		for _, spec := range []string{"drones:status=500:after=10s:for=30s", "all:latency=+300ms:after=20s:for=10s"} {
			f, err := delivery.ParseFault(spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := faults.Add(f, start); err != nil {
				t.Fatal(err)
			}
		}
		h := faults.Inject(delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{}, ledger, nil)))
		at := func(d time.Duration) { time.Sleep(start.Add(d).Sub(time.Now())) }
		expect := func(method, path, body string, status int, took time.Duration) {
			t.Helper()
			if got, gotTook := call(t, h, method, path, body); got != status || gotTook != took {
				t.Errorf("%v in: %s %s answered %d after %v, want %d after %v", time.Since(start), method, path, got, gotTook, status, took)
			}
		}
		at(5 * time.Second)
		expect("PUT", "/drones/d-1", pickup, 200, 0)
		at(15 * time.Second)
		expect("PUT", "/drones/d-2", pickup, 500, 0)
		expect("DELETE", "/drones/d-1", "", 500, 0)
		expect("GET", "/drones/d-1", "", 500, 0)
		expect("PUT", "/packages/d-2", "{}", 200, 0)
		at(25 * time.Second)
		expect("PUT", "/drones/d-3", pickup, 500, 300*time.Millisecond)
		expect("POST", "/accounts/a-1/check", "", 200, 300*time.Millisecond)
		expect("DELETE", "/packages/d-2", "", 200, 300*time.Millisecond)
		at(45 * time.Second)
		expect("PUT", "/drones/d-4", pickup, 200, 0)
		if !ledger.Live("drones", "d-1") || ledger.Undone("drones", "d-1") || ledger.Created("drones", "d-2") != 0 ||
			ledger.Created("drones", "d-3") != 0 || !ledger.Live("drones", "d-4") || !ledger.Undone("packages", "d-2") {
			t.Errorf("the ledger shows calls answered 500 as applied, or served ones as not: d-1 %+v, d-2 %+v, d-3 %+v, d-4 %+v",
				ledger.Record("d-1"), ledger.Record("d-2"), ledger.Record("d-3"), ledger.Record("d-4"))
		}
		states := map[string]string{}
		for _, sf := range faults.List() {
			states[sf.Spec] = sf.State
		}
		if want := map[string]string{"drones:status=500:after=10s:for=30s": "ended", "all:latency=+300ms:after=20s:for=10s": "ended"}; !reflect.DeepEqual(states, want) {
			t.Errorf("faults listed as %v, want %v", states, want)
		}
	})
}

// The services go down and come back at the times the schedule says,
// through the callback that closes and reopens their address; a call that
// slips in while they are down is not answered. A fault started now takes
// them down before Add returns, and clearing it brings them back before
// Clear returns.
func TestFaultScheduleDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		type change struct {
			at   time.Duration
			down bool
		}
		var changes []change
		faults := delivery.NewFaultSet(func(down bool) { changes = append(changes, change{time.Since(start), down}) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go faults.Run(ctx)
		f, err := delivery.ParseFault("all:down:after=10s:for=1m")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := faults.Add(f, start); err != nil {
			t.Fatal(err)
		}
		h := faults.Inject(delivery.HTTPHandler(delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)))
		time.Sleep(30 * time.Second)
		if status, _ := call(t, h, "DELETE", "/packages/d-1", ""); status != 0 {
			t.Errorf("a call while the services are down answered %d", status)
		}
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if want := []change{{10 * time.Second, true}, {70 * time.Second, false}}; !reflect.DeepEqual(changes, want) {
			t.Fatalf("down and up at %v, want %v", changes, want)
		}
		if status, _ := call(t, h, "DELETE", "/packages/d-1", ""); status != 200 {
			t.Errorf("a call after the services came back answered %d", status)
		}

		if _, err := faults.Add(delivery.Fault{Service: "all", Down: true}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if want := (change{90 * time.Second, true}); len(changes) != 3 || changes[2] != want {
			t.Fatalf("after adding all:down at 90 s: %v, want %v last", changes, want)
		}
		time.Sleep(5 * time.Second)
		if n := faults.Clear(); n != 1 {
			t.Errorf("Clear ended %d faults, want 1", n)
		}
		if want := (change{95 * time.Second, false}); len(changes) != 4 || changes[3] != want {
			t.Fatalf("after clearing at 95 s: %v, want %v last", changes, want)
		}
	})
}

// The admin endpoint starts a fault (its after counted from the request),
// lists every fault with its state and times, refuses a fault it cannot
// show with what is wrong, and clears them all.
func TestFaultsEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		faults := delivery.NewFaultSet(nil)
		h := delivery.FaultsHandler(faults)
		do := func(method, body string, wantStatus int, out any) string {
			t.Helper()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, "/admin/faults", strings.NewReader(body)))
			if w.Code != wantStatus {
				t.Fatalf("%s /admin/faults %s: %d %s, want %d", method, body, w.Code, w.Body, wantStatus)
			}
			if out != nil {
				if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
					t.Fatalf("%s /admin/faults: %v in %s", method, err, w.Body)
				}
			}
			return w.Body.String()
		}
		time.Sleep(time.Minute) // the request's time, not the set's, counts
		posted := time.Now()
		var sf delivery.ScheduledFault
		do("POST", `{"service":"drones","status":503,"after":"5s","for":"10s"}`, http.StatusCreated, &sf)
		wantEnds := posted.Add(15 * time.Second)
		want := delivery.ScheduledFault{Fault: delivery.Fault{Service: "drones", Status: 503, After: 5 * time.Second, For: 10 * time.Second},
			Spec: "drones:status=503:after=5s:for=10s", State: "scheduled", Starts: posted.Add(5 * time.Second), Ends: &wantEnds}
		if !sf.Starts.Equal(want.Starts) || sf.Ends == nil || !sf.Ends.Equal(wantEnds) {
			t.Fatalf("POST answered %+v, want %+v", sf, want)
		}
		sf.Starts, sf.Ends = want.Starts, want.Ends // the same instants, read back without the monotonic clock
		if !reflect.DeepEqual(sf, want) {
			t.Fatalf("POST answered %+v, want %+v", sf, want)
		}
		time.Sleep(5 * time.Second)
		do("POST", `{"service":"all","latency":"+100ms"}`, http.StatusCreated, nil)
		var list []delivery.ScheduledFault
		do("GET", "", http.StatusOK, &list)
		if len(list) != 2 || list[0].State != "active" || list[1].State != "active" || list[1].Ends != nil {
			t.Fatalf("GET listed %+v, want both active, the second without an end", list)
		}
		for body, wantErr := range map[string]string{
			`{"service":"drones","stauts":500}`:      "stauts",
			`{"service":"drones","status":200}`:      "status=200: want an HTTP error status",
			`{"service":"drones","down":true}`:       "want all:down, not drones:down",
			`{"service":"drone","latency":"1s"}`:     `service "drone"`,
			`{"service":"drones","latency":"1 sec"}`: `latency "1 sec": want a duration`,
		} {
			if got := do("POST", body, http.StatusBadRequest, nil); !strings.Contains(got, wantErr) {
				t.Errorf("POST %s answered %q, want it to say %q", body, got, wantErr)
			}
		}
		var cleared struct{ Cleared int }
		do("DELETE", "", http.StatusOK, &cleared)
		do("GET", "", http.StatusOK, &list)
		if cleared.Cleared != 2 || len(list) != 2 || list[0].State != "ended" || list[1].State != "ended" ||
			!list[1].Ends.Equal(posted.Add(5*time.Second)) {
			t.Fatalf("DELETE cleared %d, then GET listed %+v: want both ended now", cleared.Cleared, list)
		}
		if got := do("PUT", "{}", http.StatusMethodNotAllowed, nil); got == "" {
			t.Error("PUT /admin/faults: no explanation")
		}
	})
}

// The ledger says when the last undo was applied, whichever service
// applied it, and an undo that failed does not count.
func TestLedgerLastUndo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := delivery.NewLedger()
		b := delivery.Simulated(delivery.SimConfig{}, l, nil)
		if !l.LastUndo().IsZero() || l.Totals().LastUndo != nil {
			t.Fatalf("no undo yet: LastUndo %v, totals %v", l.LastUndo(), l.Totals().LastUndo)
		}
		if err := b.Packages.Delete(ctx, "d-1"); err != nil {
			t.Fatal(err)
		}
		first := time.Now()
		time.Sleep(5 * time.Second)
		if _, err := b.Drones.Schedule(ctx, "d-2", delivery.Location{Lat: 47.6, Lon: -122.3}); err != nil {
			t.Fatal(err)
		}
		if got := l.LastUndo(); !got.Equal(first) {
			t.Errorf("after a booking, LastUndo %v, want the undo's %v", got, first)
		}
		if err := b.Drones.Cancel(ctx, "d-2"); err != nil {
			t.Fatal(err)
		}
		second := time.Now()
		time.Sleep(5 * time.Second)
		failing := delivery.Simulated(delivery.SimConfig{TransientRate: 1}, l, nil)
		if err := failing.Deliveries.Delete(ctx, "d-2"); err == nil {
			t.Fatal("an undo of a service failing every call succeeded")
		}
		if got, tot := l.LastUndo(), l.Totals().LastUndo; !got.Equal(second) || tot == nil || !tot.Equal(second) {
			t.Errorf("LastUndo %v, totals %v, want the last undo applied, %v", got, tot, second)
		}
	})
}

// A set that runs for long keeps the faults that may still matter and,
// of those that ended, the last 100 when it adds one: what it holds is
// bounded.
func TestFaultSetKeepsTheLastEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		faults := delivery.NewFaultSet(nil)
		if _, err := faults.Add(delivery.Fault{Service: "drones", Status: 500}, time.Now()); err != nil {
			t.Fatal(err)
		}
		for i := range 250 {
			if _, err := faults.Add(delivery.Fault{Service: "packages", Status: 400 + i%200, For: time.Second}, time.Now()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
		}
		list := faults.List()
		if len(list) != 102 || list[0].Spec != "drones:status=500" || list[0].State != "active" ||
			list[1].Spec != "packages:status=549:for=1s" || list[101].Spec != "packages:status=449:for=1s" {
			t.Fatalf("after 250 faults ended: %d listed, first %+v, second %+v", len(list), list[0], list[1])
		}
	})
}

package delivery_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// ledgerOfThree books d-1 completely, compensates d-2 after its package
// and drone, and books d-3's drone twice (a service that is not
// idempotent).
func ledgerOfThree(t *testing.T) *delivery.Ledger {
	t.Helper()
	ctx := context.Background()
	l := delivery.NewLedger()
	b := delivery.SimulatedNonIdempotent(delivery.SimConfig{}, l, nil)
	r := valid()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Packages.Put(ctx, "d-1", r))
	_, err := b.Drones.Schedule(ctx, "d-1", r.Pickup)
	must(err)
	must(b.Deliveries.Put(ctx, "d-1", delivery.Progress{Request: r}))
	must(b.Packages.Put(ctx, "d-2", r))
	_, err = b.Drones.Schedule(ctx, "d-2", r.Pickup)
	must(err)
	must(b.Drones.Cancel(ctx, "d-2"))
	must(b.Deliveries.Delete(ctx, "d-2"))
	must(b.Packages.Delete(ctx, "d-2"))
	for range 2 {
		_, err = b.Drones.Schedule(ctx, "d-3", r.Pickup)
		must(err)
	}
	return l
}

func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s, %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The ledger endpoint's documents have the documented shape: totals per
// service, and one request's entry per service.
func TestLedgerEndpointShape(t *testing.T) {
	srv := httptest.NewServer(delivery.LedgerHandler(ledgerOfThree(t)))
	defer srv.Close()
	svc := func(created, live, undone, twice float64) map[string]any {
		return map[string]any{"created": created, "live": live, "undone": undone, "created_twice": twice}
	}
	want := map[string]any{"ids": 3.0, "services": map[string]any{
		"packages":   svc(2, 1, 1, 0),
		"drones":     svc(4, 2, 1, 1),
		"deliveries": svc(1, 1, 1, 0),
	}}
	got := getJSON(t, srv.URL+"/ledger")
	// When the last undo was applied: d-2's, while the ledger was built.
	if last, ok := got["last_undo"].(string); !ok {
		t.Errorf("GET /ledger says no last_undo: %v", got)
	} else if at, err := time.Parse(time.RFC3339Nano, last); err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Errorf("GET /ledger: last_undo %q (%v), want the time of d-2's undo", last, err)
	}
	delete(got, "last_undo")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /ledger = %v, want %v", got, want)
	}
	entry := func(created float64, live, undone bool) map[string]any {
		return map[string]any{"created": created, "live": live, "undone": undone}
	}
	for id, want := range map[string]map[string]any{
		"d-1": {"id": "d-1", "packages": entry(1, true, false), "drones": entry(1, true, false), "deliveries": entry(1, true, false)},
		"d-2": {"id": "d-2", "packages": entry(1, false, true), "drones": entry(1, false, true), "deliveries": entry(0, false, true)},
		"d-3": {"id": "d-3", "packages": entry(0, false, false), "drones": entry(2, true, false), "deliveries": entry(0, false, false)},
		"d-9": {"id": "d-9", "packages": entry(0, false, false), "drones": entry(0, false, false), "deliveries": entry(0, false, false)},
	} {
		got := getJSON(t, srv.URL+"/ledger/"+id)
		// A delivery record says when it was created, and an undone
		// record when it was undone: while the ledger was built.
		for svc, e := range got {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			for field, was := range map[string]bool{"undone_at": m["undone"] == true, "created_at": m["created"] != 0.0 && svc == "deliveries"} {
				if (m[field] != nil) != was {
					t.Errorf("GET /ledger/%s: %s %s %v in %v", id, svc, field, m[field], m)
					continue
				}
				if m[field] == nil {
					continue
				}
				at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m[field]))
				if err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
					t.Errorf("GET /ledger/%s: %s %s %v (%v), want the time the ledger was built", id, svc, field, m[field], err)
				}
				delete(m, field)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("GET /ledger/%s = %v, want %v", id, got, want)
		}
	}
	resp, err := http.Get(srv.URL + "/ledger?records=some")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /ledger?records=some: %s, want 400", resp.Status)
	}
}

// Every record, downloaded, answers what the ledger itself answers; the
// download is gzipped for a client that accepts it, plain for one that
// does not.
func TestLedgerDownloadMatchesTheLedger(t *testing.T) {
	l := ledgerOfThree(t)
	srv := httptest.NewServer(delivery.LedgerHandler(l))
	defer srv.Close()
	ctx := context.Background()
	snap, err := delivery.FetchLedger(ctx, srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The records carry their own undo times; only the ledger knows its
	// last undo.
	lt := l.Totals()
	if lt.LastUndo == nil || snap.Totals().LastUndo != nil {
		t.Errorf("last undo: the ledger's %v, the snapshot's %v; want the time, and nil", lt.LastUndo, snap.Totals().LastUndo)
	}
	lt.LastUndo = nil
	if snap.Len() != 3 || !reflect.DeepEqual(snap.Totals(), lt) || snap.Twice() != l.Twice() {
		t.Fatalf("snapshot of %d ids, totals %+v, twice %d; the ledger: %+v, twice %d",
			snap.Len(), snap.Totals(), snap.Twice(), l.Totals(), l.Twice())
	}
	for _, svc := range []string{"packages", "drones", "deliveries"} {
		if snap.LiveCount(svc) != l.LiveCount(svc) || snap.UndoneCount(svc) != l.UndoneCount(svc) {
			t.Errorf("%s: snapshot live %d undone %d, ledger live %d undone %d", svc,
				snap.LiveCount(svc), snap.UndoneCount(svc), l.LiveCount(svc), l.UndoneCount(svc))
		}
		for _, id := range []string{"d-1", "d-2", "d-3", "d-9"} {
			if snap.Live(svc, id) != l.Live(svc, id) || snap.Undone(svc, id) != l.Undone(svc, id) ||
				snap.Created(svc, id) != l.Created(svc, id) {
				t.Errorf("%s %s: snapshot %+v, ledger %+v", svc, id, snap.Record(id), l.Record(id))
			}
		}
	}
	one, err := delivery.FetchLedgerRecord(ctx, srv.Client(), srv.URL, "d-3")
	if err != nil || !reflect.DeepEqual(one, l.Record("d-3")) {
		t.Fatalf("FetchLedgerRecord(d-3) = %+v, %v; want %+v", one, err, l.Record("d-3"))
	}

	for _, accept := range []string{"gzip", "identity", "gzip;q=0"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ledger?records=all", nil)
		req.Header.Set("Accept-Encoding", accept) // set by hand: the transport leaves the body as sent
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := io.Reader(resp.Body)
		if gz := resp.Header.Get("Content-Encoding") == "gzip"; gz != (accept == "gzip") {
			t.Fatalf("Accept-Encoding %s: Content-Encoding %q", accept, resp.Header.Get("Content-Encoding"))
		} else if gz {
			if body, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(string(b), "\n"); lines != 3 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("Accept-Encoding %s: %d lines of %s:\n%s", accept, lines, resp.Header.Get("Content-Type"), b)
		}
	}
}

// A download cut short is an error, not a smaller ledger; so are a line
// without an id and an id twice.
func TestLedgerSnapshotRefusesBadInput(t *testing.T) {
	line := `{"id":"d-1","packages":{"created":1,"live":true,"undone":false}}` + "\n"
	cut := io.MultiReader(strings.NewReader(line+`{"id":"d-2","pack`), errReader{io.ErrUnexpectedEOF})
	if _, err := delivery.ReadLedgerSnapshot(cut); err == nil {
		t.Error("a download cut in a record was read without an error")
	}
	cut = io.MultiReader(strings.NewReader(line), errReader{io.ErrUnexpectedEOF})
	if _, err := delivery.ReadLedgerSnapshot(cut); err == nil {
		t.Error("a download cut between records was read without an error")
	}
	for _, in := range []string{line + line, `{"packages":{"created":1}}` + "\n", "[1,2]\n"} {
		if _, err := delivery.ReadLedgerSnapshot(strings.NewReader(in)); err == nil {
			t.Errorf("%q was read without an error", in)
		}
	}
	s, err := delivery.ReadLedgerSnapshot(strings.NewReader(line))
	if err != nil || s.Len() != 1 || !s.Live("packages", "d-1") || s.Live("drones", "d-1") {
		t.Fatalf("one good line: %v %+v", err, s)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// Reading the whole ledger does not hold its locks while the reader
// works: the services can write while a download is under way.
func TestLedgerWritableWhileRead(t *testing.T) {
	l := ledgerOfThree(t)
	b := delivery.Simulated(delivery.SimConfig{}, l, nil)
	done := make(chan error, 1)
	go func() {
		n := 0
		for rec := range l.All() {
			n++
			// The same shard as the record being read.
			if err := b.Packages.Put(context.Background(), rec.ID, valid()); err != nil && !errors.Is(err, delivery.ErrCancelled) {
				done <- err
				return
			}
		}
		if n != 3 {
			done <- errors.New("All did not yield every record")
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writing to the ledger while reading it did not return: a lock is held across the read")
	}
	if !l.Live("packages", "d-3") || l.Live("packages", "d-2") {
		t.Fatalf("after the writes: %+v %+v", l.Record("d-3"), l.Record("d-2"))
	}
}

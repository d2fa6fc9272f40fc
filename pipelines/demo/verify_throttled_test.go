package demo_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// The verification measures each completed request's latency itself, from
// when the load generator produced it (the record file) to when the
// deliveries service created its record (the ledger), and gives the
// requests a service throttled apart from the others: a worker without
// sluice's histograms is measured alike, and the 1% of requests that
// waited a Retry-After do not set the p99 of those that did not. A
// compensated request, throttled or not, is not a completion; a request
// whose times are not known (a ledger of an earlier version) is not
// measured.
func TestVerifySplitsTheLatencyOfThrottledRequests(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "delivery-dead-letters", "delivery-compensation-dead-letters", "delivery-failures")
	t0 := time.UnixMilli(1_748_772_000_000)
	snap := delivery.NewLedgerSnapshot()
	var record strings.Builder
	var lines []string
	add := func(id string, latency time.Duration, throttled int, compensated bool) {
		t.Helper()
		sentAt := t0.Add(time.Duration(len(lines)) * time.Millisecond)
		lines = append(lines, fmt.Sprintf(`{"id":%q,"kind":"deliverable","at_ms":%d}`, id, sentAt.UnixMilli()))
		done := sentAt.Add(latency)
		live := delivery.LedgerEntry{Created: 1, Live: true, CreatedAt: &done}
		rec := delivery.LedgerRecord{ID: id, Packages: live, Drones: live, Deliveries: live, Throttled: throttled}
		if compensated {
			undone := delivery.LedgerEntry{Created: 1, Undone: true, CreatedAt: &done, UndoneAt: &done}
			rec.Packages, rec.Drones, rec.Deliveries = undone, undone, undone
		}
		if latency < 0 { // a ledger that does not say when
			rec.Deliveries.CreatedAt = nil
		}
		if err := snap.Add(rec); err != nil {
			t.Fatal(err)
		}
	}
	// 200 never throttled, 10 to 2,000 ms; 3 throttled, 1.1 to 3.1 s.
	for i := range 200 {
		add(fmt.Sprintf("d-%08d", i), time.Duration(10*(i+1))*time.Millisecond, 0, false)
	}
	for i, d := range []time.Duration{1100 * time.Millisecond, 2100 * time.Millisecond, 3100 * time.Millisecond} {
		add(fmt.Sprintf("d-%08d", 200+i), d, 1+i, false)
	}
	add("d-00000300", 9*time.Second, 2, true) // compensated
	add("d-00000301", 9*time.Second, 0, true) // compensated
	add("d-00000302", -1, 0, false)           // completed, its completion time unknown
	fmt.Fprintf(&record, `{"format":"sluice-loadgen-record","version":3,"sent":%d,"duplicates":0,"requests":%d,"unconfirmed":0}`+"\n",
		len(lines), len(lines))
	record.WriteString(strings.Join(lines, "\n") + "\n")
	sent, err := loadgen.ReadRecord(strings.NewReader(record.String()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := demo.Verify(sent, snap, brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s)
	wantNever := demo.Latencies{N: 200, P50: 1010 * time.Millisecond, P99: 1990 * time.Millisecond}
	wantThrottled := demo.Latencies{N: 3, P50: 2100 * time.Millisecond, P99: 3100 * time.Millisecond}
	if s.NeverThrottled != wantNever || s.Throttled != wantThrottled {
		t.Errorf("never throttled %+v, throttled %+v; want %+v and %+v", s.NeverThrottled, s.Throttled, wantNever, wantThrottled)
	}
	if s.Completed != 204 || s.Compensated != 2 {
		t.Errorf("completed %d, compensated %d; want 204 and 2", s.Completed, s.Compensated)
	}
	if !strings.Contains(s.String(), "p99 never throttled 1.99s (n=200, p50 1.01s), throttled 3.1s (n=3, p50 2.1s)") {
		t.Errorf("the verdict does not show the split:\n%s", s)
	}

}

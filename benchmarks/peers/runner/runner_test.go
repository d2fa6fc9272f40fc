package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// TestRunKfake runs the Go implementations of the main module through the
// runner's own code (build, processes, protocol, offsets, table) against
// kfake, with a small topic: every row must finish, pass its check and
// read as a table row.
func TestRunKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every peer against a broker: make test runs it, -short does not")
	}
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress strings.Builder
	cfg := Config{
		Brokers:  testenv.KfakeWith(t),
		Workload: Workload{Topic: "peers", Partitions: 16, Records: 20_000, ValueSize: 200, Keys: 10_000},
		Inflight: 256,
		Work:     2 * time.Millisecond,
		Impls:    []string{"sluice", "franzgo", "parallel-consumer-missing"},
		Orders:   []string{"unordered", "key"},
		Timeout:  time.Minute,
		Root:     root,
		Logs:     t.TempDir(),
		Progress: &progress,
		// The peers' own goroutines get the race detector too.
		GoBuildFlags: raceFlags,
	}
	hows["parallel-consumer-missing"] = buildScript
	defer delete(hows, "parallel-consumer-missing")
	rows, err := Run(ctx, cfg)
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	var table strings.Builder
	writeTable(&table, rows)
	t.Log("\n" + table.String())
	for _, r := range rows[:4] {
		if r.Status != "ok" || !r.Passed || r.Detail != "" { // Detail: exit code 66 of a race, say
			t.Errorf("%s %s: %s %s, check %q", r.Impl, r.Order, r.Status, r.Detail, r.Check)
			continue
		}
		if r.RecordsPerSec <= 0 || r.P99InprocMS < 2 || r.P99MS < r.P50MS || r.Processed < 20_000 ||
			r.Semantics != "at-least-once" || r.Notes == "" {
			t.Errorf("%s %s: incomplete row %+v", r.Impl, r.Order, r)
		}
		if !strings.Contains(table.String(), "| "+r.Impl+" | "+r.Order+" | ") {
			t.Errorf("%s %s: no table row", r.Impl, r.Order)
		}
	}
	for _, r := range rows[4:] {
		if r.Status != "not built" {
			t.Errorf("%s %s: status %q, want not built (%s)", r.Impl, r.Order, r.Status, r.Detail)
		}
	}
}

// The command fails when a row did not run to a passing check, naming it.
func TestNotPassedNamesTheRows(t *testing.T) {
	ok := Row{Impl: "sluice", Order: "key", Status: "ok", Passed: true}
	if err := notPassed([]Row{ok}); err != nil {
		t.Fatalf("all passed: %v", err)
	}
	short := Row{Impl: "franzgo", Order: "unordered", Status: "ok", Check: "FAIL: partition 3 …"}
	missing := Row{Impl: "watermill", Order: "key", Status: "not built"}
	err := notPassed([]Row{ok, short, missing})
	if err == nil || !strings.Contains(err.Error(), "2 of 3 rows") || !strings.Contains(err.Error(), "franzgo unordered (ok)") ||
		!strings.Contains(err.Error(), "watermill key (not built)") || strings.Contains(err.Error(), "sluice") {
		t.Fatalf("got %v", err)
	}
}

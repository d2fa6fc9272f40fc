package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// sluice loadgen -record writes what it sent to the file, which reads back
// as what it sent; a path that cannot be written stops it before it sends.
func TestLoadgenRecord(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "delivery-requests")
	dir := t.TempDir()
	path := filepath.Join(dir, "sent.jsonl")
	sent, err := loadgenCmd(context.Background(), []string{"-brokers", brokers[0], "-rate", "500", "-burst", "0",
		"-duration", "500ms", "-record", path})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := loadgen.ReadRecord(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds, dups := sent.Kinds()
	backKinds, backDups := back.Kinds()
	if len(kinds) == 0 || !maps.Equal(kinds, backKinds) || dups != backDups || back.Total() != sent.Total() {
		t.Fatalf("the record read back holds %d requests (%d duplicates, %d sent); the load generator sent %d (%d, %d)",
			len(backKinds), backDups, back.Total(), len(kinds), dups, sent.Total())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files beside the record, want none: %v", len(entries)-1, entries)
	}

	err = runLoadgen(context.Background(), []string{"-brokers", "127.0.0.1:1", "-record", filepath.Join(dir, "missing", "sent.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "-record") || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("an unwritable record: %v, want an error naming -record before connecting", err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// sluice loadgen -transport redis writes each request to the Redis stream
// of its level's topic, and what it says Redis acknowledged is what the
// streams hold: every request of its record, with its key and value.
func TestLoadgenOnRedisStreams(t *testing.T) {
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	var out testenv.Buffer
	loadgenOutput = &out
	defer func() { loadgenOutput = os.Stdout }()
	levels := []string{"req-high", "req-normal", "req-low"}
	record := filepath.Join(t.TempDir(), "sent.jsonl")
	sent, err := loadgenCmd(context.Background(), []string{"-transport", "redis", "-redis", "redis://" + addr + "/0",
		"-level-topics", strings.Join(levels, ","), "-rate", "1000", "-burst", "0", "-duration", "500ms", "-record", record})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("acknowledged by redis: %d requests", sent.Total())) {
		t.Fatalf("loadgen said:\n%s", out.String())
	}
	kinds, _ := sent.Kinds()
	held := map[string]int{}
	for l, name := range levels {
		recs := streamRecords(t, rc, name)
		if int64(len(recs)) != sent.Levels()[l] {
			t.Fatalf("stream %s holds %d entries, %d requests of its level were acknowledged", name, len(recs), sent.Levels()[l])
		}
		for _, r := range recs {
			held[string(r.Key)]++
			var req delivery.Request
			if kinds[string(r.Key)] != loadgen.Deliverable {
				continue // malformed, or a request that fails later on purpose
			}
			if err := json.Unmarshal(r.Value, &req); err != nil {
				t.Fatalf("entry %s of %s: %v", redisstream.EntryID(r.Offset), name, err)
			}
			if req.ID != string(r.Key) || len(r.Headers) != 0 {
				t.Fatalf("entry %s of %s: key %q, value of request %q, headers %v", redisstream.EntryID(r.Offset), name, r.Key, req.ID, r.Headers)
			}
		}
	}
	if len(kinds) == 0 || len(held) != len(kinds) {
		t.Fatalf("the streams hold %d distinct requests, the record %d", len(held), len(kinds))
	}
	for id := range kinds {
		if held[id] == 0 {
			t.Fatalf("%s recorded as acknowledged, in no stream", id)
		}
	}
}

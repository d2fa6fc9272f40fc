package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/internal/testenv"
)

// One worker writes one log stream: its own lines, the lines of libraries
// that log through slog's default, and go-redis's (which printed "redis:
// 2026/11/23 08:29:05 pool.go:770: failed to dial" in a format of its own,
// twice a second during an outage) all come out in the chosen format.
func TestOneLogStream(t *testing.T) {
	prev := slog.Default()
	defer func() { slog.SetDefault(prev); redis.SetLogger(logx.NewPrintf(prev, "go-redis")) }()
	var out testenv.Buffer
	lf := logFlags{format: "json", level: "info"}
	lg, err := lf.logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	lg.Info("worker running")
	slog.Warn("commit failed; the next one covers the same offsets") // the checkpoint sink's default logger
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil && !strings.Contains(out.String(), `"component":"go-redis"`) {
		_ = rc.Ping(ctx).Err()
		time.Sleep(50 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var redisLines int
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a line that is not JSON: %q", l)
		}
		if m["component"] == "go-redis" {
			redisLines++
		}
	}
	if redisLines == 0 || len(lines) < 3 {
		t.Fatalf("want the worker's, the default logger's and go-redis's lines, all JSON; got:\n%s", out.String())
	}
	if _, err := (&logFlags{format: "logfmt", level: "info"}).logger(&out); err == nil || !strings.Contains(err.Error(), `"logfmt"`) {
		t.Fatalf("-log-format logfmt: %v, want an error naming it", err)
	}
}

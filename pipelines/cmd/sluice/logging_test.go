package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
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

// With -log-format json every line a worker writes is JSON, its last —
// the error that stops it, which main prints — included; with text, that
// last line stays a line of text. (Before: "sluice: the delivery worker's
// topics: ..." in plain text after the JSON lines.)
func TestJSONLogEndsWithAJSONLine(t *testing.T) {
	prev := slog.Default()
	defer func() {
		slog.SetDefault(prev)
		redis.SetLogger(logx.NewPrintf(prev, "go-redis"))
		logOutput = os.Stderr
	}()
	for _, c := range []struct {
		why  string
		args []string
	}{
		{"the broker does not answer", []string{"-brokers", "127.0.0.1:1"}},
		{"a flag out of range", []string{"-replay-after", "-1s"}},
	} {
		var out bytes.Buffer
		logOutput = &out
		err := runWorker(context.Background(), append([]string{"delivery", "-log-format", "json"}, c.args...))
		if code := exit(err, &out); code != 1 {
			t.Fatalf("%s: exit code %d (%v)", c.why, code, err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: a line that is not JSON: %q", c.why, l)
			}
		}
		var last map[string]any
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
		if last["level"] != "ERROR" || !strings.Contains(fmt.Sprint(last["err"]), err.Error()) {
			t.Fatalf("%s: the last line %v, want the error at level ERROR", c.why, last)
		}
	}
	var out bytes.Buffer
	logOutput = &out
	err := runWorker(context.Background(), []string{"delivery", "-log-format", "text", "-replay-after", "-1s"})
	exit(err, &out)
	if got := strings.TrimSpace(out.String()); got != "sluice: "+err.Error() {
		t.Fatalf("text: the last line %q, want the error as text", got)
	}
}

package logx_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/internal/logx"
)

func TestLimitedSuppressesAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		l := logx.NewLimited(slog.New(slog.NewTextHandler(&buf, nil)), time.Second, 3)
		for range 100 {
			l.Log(context.Background(), slog.LevelWarn, "timeout", "retrying")
		}
		l.Log(context.Background(), slog.LevelWarn, "connection", "retrying") // another key has its own budget
		time.Sleep(time.Second)
		l.Log(context.Background(), slog.LevelWarn, "timeout", "retrying")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 5 || !strings.Contains(lines[4], "suppressed=97") {
			t.Fatalf("%d lines:\n%s", len(lines), buf.String())
		}
	})
}

func TestNewFormatsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	l, err := logx.New(&buf, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	if got := strings.TrimSpace(buf.String()); !strings.HasPrefix(got, `{"time":`) || !strings.Contains(got, `"msg":"shown","k":1`) || strings.Contains(got, "hidden") {
		t.Fatalf("json at warn wrote %q", got)
	}
	for _, c := range [][2]string{{"xml", "info"}, {"text", "loud"}} {
		if _, err := logx.New(&buf, c[0], c[1]); err == nil || !strings.Contains(err.Error(), `"`+map[bool]string{true: c[0], false: c[1]}[c[0] == "xml"]+`"`) {
			t.Fatalf("New(%q, %q): %v, want an error naming the bad value", c[0], c[1], err)
		}
	}
}

func TestPrintfAdaptsAndLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		p := logx.NewPrintf(slog.New(slog.NewTextHandler(&buf, nil)), "go-redis")
		for i := range 50 {
			p.Printf(context.Background(), "redis: failed to dial after %d attempts: %v\n", i, "connection refused")
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], `level=WARN msg="redis: failed to dial after 0 attempts: connection refused" component=go-redis`) {
			t.Fatalf("%d lines:\n%s", len(lines), buf.String())
		}
		time.Sleep(10 * time.Second)
		p.Printf(context.Background(), "redis: failed to dial after %d attempts: %v\n", 99, "connection refused")
		if !strings.Contains(buf.String(), "suppressed=47") {
			t.Fatalf("the line after the pause does not count the suppressed ones:\n%s", buf.String())
		}
	})
}

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

// Package logx rate-limits repeated log lines, so that an outage that
// fails thousands of calls a second writes a few lines a second, each
// saying how many like it were suppressed.
package logx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Limited logs at most burst lines per key and then one per interval,
// counting the rest.
type Limited struct {
	l        *slog.Logger
	interval time.Duration
	burst    int

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	tokens     float64
	last       time.Time
	suppressed int64
}

// NewLimited returns a rate-limited logger over l.
func NewLimited(l *slog.Logger, interval time.Duration, burst int) *Limited {
	return &Limited{l: l, interval: interval, burst: burst, keys: map[string]*state{}}
}

// Log writes msg at level unless lines with the same key came too often;
// the next line written for the key carries the count suppressed since. Keys
// must come from a bounded set (a reason, a stage), never from message ids.
func (g *Limited) Log(ctx context.Context, level slog.Level, key, msg string, attrs ...slog.Attr) {
	if !g.l.Enabled(ctx, level) {
		return
	}
	now := time.Now()
	g.mu.Lock()
	s := g.keys[key]
	if s == nil {
		s = &state{tokens: float64(g.burst), last: now}
		g.keys[key] = s
	}
	s.tokens = min(float64(g.burst), s.tokens+float64(now.Sub(s.last))/float64(g.interval))
	s.last = now
	if s.tokens < 1 {
		s.suppressed++
		g.mu.Unlock()
		return
	}
	s.tokens--
	suppressed := s.suppressed
	s.suppressed = 0
	g.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	g.l.LogAttrs(ctx, level, msg, attrs...)
}

// New returns a logger writing to w in format "text" or "json" from level
// ("debug", "info", "warn" or "error") up, or an error naming the bad one.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// Printf adapts a library that logs through Printf(ctx, format, args)
// (go-redis's redis.SetLogger) to a rate-limited slog logger: each line
// at Warn, with the library named, and a format that repeats (a dial
// failing twice a second during an outage) limited like any other key.
type Printf struct {
	g         *Limited
	component string
}

// NewPrintf returns the adapter for library component over l.
func NewPrintf(l *slog.Logger, component string) *Printf {
	return &Printf{g: NewLimited(l, 10*time.Second, 3), component: component}
}

// Printf logs one line.
func (p *Printf) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	p.g.Log(ctx, slog.LevelWarn, format, strings.TrimSpace(fmt.Sprintf(format, v...)), slog.String("component", p.component))
}

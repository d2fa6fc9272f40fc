package kafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/logx"
)

// NewLogger adapts l to franz-go's client logger (kgo.WithLogger), so that
// the client's own lines — a broker that cannot be dialed, a group that
// cannot be joined — reach the same handler as the application's, rate
// limited per message. franz-go's warnings and errors keep their level;
// its info lines, frequent in a healthy group, are logged at debug, and
// its debug lines not at all.
func NewLogger(l *slog.Logger) kgo.Logger {
	return &kgoLogger{l: l, g: logx.NewLimited(l.With("component", "franz-go"), 10*time.Second, 3)}
}

type kgoLogger struct {
	l *slog.Logger
	g *logx.Limited
}

func (k *kgoLogger) Level() kgo.LogLevel {
	switch ctx := context.Background(); {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case k.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (k *kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	case kgo.LogLevelDebug:
		return
	}
	attrs := make([]slog.Attr, 0, len(keyvals)/2)
	for i := 0; i+1 < len(keyvals); i += 2 {
		key, _ := keyvals[i].(string)
		attrs = append(attrs, slog.Any(key, keyvals[i+1]))
	}
	k.g.Log(context.Background(), lv, msg, msg, attrs...)
}

package main

import (
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/logx"
)

// logOutput is where the long-running commands log (tests swap it).
var logOutput io.Writer = os.Stderr

// logFlags choose a long-running command's log format and level. Every
// line of the process goes through the one handler: the application's,
// the libraries that log through slog's default (the checkpoint sink),
// franz-go's (kafka.NewLogger) and go-redis's (redis.SetLogger).
type logFlags struct{ format, level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "text or json (one object per line)")
	fs.StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
}

// logger builds the handler, makes it the process's default and go-redis's.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	lg, err := logx.New(w, l.format, l.level)
	if err != nil {
		return nil, err
	}
	slog.SetDefault(lg)
	redis.SetLogger(logx.NewPrintf(lg, "go-redis"))
	return lg, nil
}

package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

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

// logger builds the handler, makes it the process's default and go-redis's
// and, in JSON, the one main prints the command's error through (jsonLog).
// A command calls it as soon as its flags are parsed, so that the errors
// of its other flags come out in the chosen format too.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	lg, _, err := l.workerLogger(w, 0)
	return lg, err
}

// workerLogger is logger for a worker that logs a summary every
// summaryEvery: its retry warnings are folded into the summaries (fold,
// nil when summaryEvery is 0: every warning the stages log is written).
func (l *logFlags) workerLogger(w io.Writer, summaryEvery time.Duration) (lg *slog.Logger, fold *retryFold, err error) {
	if lg, err = logx.New(w, l.format, l.level); err != nil {
		return nil, nil, err
	}
	if summaryEvery > 0 {
		fold = newRetryFold(lg.Handler())
		lg = slog.New(fold)
	}
	slog.SetDefault(lg)
	redis.SetLogger(logx.NewPrintf(lg, "go-redis"))
	if l.format == "json" {
		jsonLog.Store(lg)
	} else {
		jsonLog.Store(nil)
	}
	return lg, fold, nil
}

// jsonLog is the logger of a command that logs JSON: main's last line, the
// error that ends the command, goes through it, so that a log shipper
// parses every line. Nil: the error is printed as text.
var jsonLog atomic.Pointer[slog.Logger]

// printError prints msg, the error main ends with: through jsonLog if
// set, as a line of text on w otherwise.
func printError(w io.Writer, msg string) {
	if lg := jsonLog.Load(); lg != nil {
		lg.Error("sluice stopped", "err", msg)
		return
	}
	fmt.Fprintln(w, msg)
}

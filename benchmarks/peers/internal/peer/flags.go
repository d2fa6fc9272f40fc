package peer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// Flags are the protocol's flags, all required, plus -cpuprofile.
type Flags struct {
	Brokers    []string
	Topic      string
	Group      string
	Keyed      bool // -order key
	Inflight   int
	Work       time.Duration
	CPUProfile string
}

// Parse parses os.Args by the protocol; it exits 2 on a bad or missing flag.
func Parse() Flags {
	var f Flags
	brokers := flag.String("brokers", "", "seed brokers, host:port[,host:port]")
	flag.StringVar(&f.Topic, "topic", "", "topic to consume")
	flag.StringVar(&f.Group, "group", "", "consumer group (fresh for each run)")
	order := flag.String("order", "", "unordered or key (a key's records one at a time, in offset order)")
	flag.IntVar(&f.Inflight, "inflight", 0, "most calls in flight")
	flag.DurationVar(&f.Work, "work", 0, "each call waits this long on a timer")
	flag.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	err := func() error {
		switch {
		case *brokers == "":
			return errors.New("-brokers is required")
		case f.Topic == "":
			return errors.New("-topic is required")
		case f.Group == "":
			return errors.New("-group is required")
		case f.Inflight < 1:
			return fmt.Errorf("-inflight must be at least 1, got %d", f.Inflight)
		case f.Work <= 0:
			return fmt.Errorf("-work must be positive, got %v", f.Work)
		}
		switch *order {
		case "unordered":
		case "key":
			f.Keyed = true
		default:
			return fmt.Errorf("-order must be unordered or key, got %q", *order)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		flag.Usage()
		os.Exit(2)
	}
	f.Brokers = strings.Split(*brokers, ",")
	return f
}

// Order returns "key" or "unordered".
func (f Flags) Order() string {
	if f.Keyed {
		return "key"
	}
	return "unordered"
}

// StartProfile starts the CPU profile if -cpuprofile was given; the
// returned function stops it.
func (f Flags) StartProfile() (stop func(), err error) {
	if f.CPUProfile == "" {
		return func() {}, nil
	}
	out, err := os.Create(f.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); out.Close() }, nil
}

// Terminated returns a channel closed on SIGTERM or SIGINT.
func Terminated() <-chan struct{} {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() { <-c; close(done) }()
	return done
}

// Main runs a Go peer: it parses the protocol's flags, logs warnings and
// errors to stderr, writes a CPU profile if -cpuprofile asks, and calls
// run with a context that SIGTERM (or an interrupt) cancels. An error
// from run is logged and exits 1.
func Main(name string, run func(ctx context.Context, f Flags, log *slog.Logger) error) {
	f := Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := func() error {
		stop, err := f.StartProfile()
		if err != nil {
			return err
		}
		defer stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		term := Terminated()
		go func() { <-term; cancel() }()
		return run(ctx, f, log)
	}()
	if err != nil {
		log.Error(name+" peer", "err", err)
		os.Exit(1)
	}
}

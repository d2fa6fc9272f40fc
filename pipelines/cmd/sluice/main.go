// Command sluice is the worker binary. Subcommands:
//
//	sluice demo [-rate N] [-duration D]   run the demo pipeline on generated load
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-streams/sluice/pipelines/demo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func usage() error {
	return fmt.Errorf("usage: sluice demo [-rate N] [-duration D] [-listen 127.0.0.1:9464]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		rate := fs.Float64("rate", 200_000, "generated requests per second")
		dur := fs.Duration("duration", 10*time.Second, "how long to generate load before draining")
		listen := fs.String("listen", "127.0.0.1:9464", `serve /metrics and the live /status page here ("" to turn off)`)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		fmt.Printf("sluice demo: generate -> parse -> validate -> price -> deliver at %.0f req/s for %v (Ctrl-C stops and drains)\n", *rate, *dur)
		sum, err := demo.Run(ctx, demo.Config{Rate: *rate, Duration: *dur, Listen: *listen}, os.Stdout)
		fmt.Println(sum)
		return err
	default:
		return usage()
	}
}

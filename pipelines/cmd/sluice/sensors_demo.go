package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// runSensorsDemo runs `sluice demo sensors`: the whole workload in one
// process on embedded defaults, verified at the end.
func runSensorsDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo sensors", flag.ContinueOnError)
	dur := fs.Duration("duration", 40*time.Second, "how long the load is sent")
	homes := fs.Int("homes", sensors.DefaultDemoHomes, "homes: a window write per home per simulated minute (the embedded Redis runs each in a Lua interpreter of its own: at compression 60 on 2 cores it keeps up with about 2,000)")
	kinds := fs.Int("kinds", 3, fmt.Sprintf("kinds of sensor at the start (1 to %d)", sensors.NumKinds))
	addKindAfter := fs.Duration("add-kind-after", 0, "add the next kind after this long (0: midway through -duration; -1s: never)")
	compression := fs.Float64("compression", 60, "simulated time per real time")
	instances := fs.Int("instances", 3, "instances at the start; a third of the way the second stops, two thirds of the way another joins")
	partitions := fs.Int("partitions", 16, "partitions of the readings topic")
	interval := fs.Duration("interval", 500*time.Millisecond, "ownership renewal interval: a member claims a partition per round at start")
	expiration := fs.Duration("expiration", 3*time.Second, "lease: a partition whose owner has not renewed it for this long is claimed by another")
	drain := fs.Duration("drain", time.Minute, "once the load is sent, how long to wait at most for every checkpoint to reach its log's end")
	listen := fs.String("listen", defaultListen["demo sensors"], `serve the residents' page (/homes) and the instances' pipelines live (/status) here ("" to turn off)`)
	if err := parseFlags("demo sensors", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo sensors: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *dur <= 0:
		return fmt.Errorf("-duration %v: must be more than 0", *dur)
	case *homes < 1:
		return fmt.Errorf("-homes %d: want at least 1", *homes)
	case *kinds < 1 || *kinds > sensors.NumKinds:
		return fmt.Errorf("-kinds %d: want 1 to %d", *kinds, sensors.NumKinds)
	case *compression <= 0 || math.IsInf(*compression, 0) || math.IsNaN(*compression):
		return fmt.Errorf("-compression %v: want more than 0", *compression)
	case dur.Seconds()**compression < 60:
		return fmt.Errorf("-duration %v at -compression %v: less than a simulated minute", *dur, *compression)
	case *instances < 2:
		return fmt.Errorf("-instances %d: want 2 at least (one of them stops)", *instances)
	case *partitions < 1 || *partitions > 1024:
		return fmt.Errorf("-partitions %d: want 1 to 1024", *partitions)
	case *interval <= 0:
		return fmt.Errorf("-interval %v: must be more than 0", *interval)
	case *expiration <= *interval:
		return fmt.Errorf("-expiration %v: must be more than -interval %v", *expiration, *interval)
	case *drain <= 0:
		return fmt.Errorf("-drain %v: must be more than 0", *drain)
	}
	cfg := sensors.DemoConfig{Homes: *homes, Kinds: *kinds, Compression: *compression, AddKindAfter: *addKindAfter,
		Duration: *dur, Partitions: int32(*partitions), Instances: *instances, Interval: *interval, Expiration: *expiration,
		Drain: *drain, Listen: *listen}
	// The workers' errors go to stderr. Their warnings are left out: a
	// joining member takes its share by stealing partitions, which the
	// owner that loses one logs as a warning (the status lines show the
	// moves).
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg.Logger = lg
	fmt.Fprintln(out, "sluice demo sensors: home-security readings on an embedded broker, aggregated per home and minute into an embedded Redis")
	fmt.Fprintln(out, "  readings (key: home) -> ownership balancer (partitions by Redis lease) -> parse (malformed: dead letter)")
	fmt.Fprintln(out, "  -> filter (heartbeats, out of range) -> window per home per minute (late: dead letter) -> write to Redis -> checkpoint")
	sum, err := sensors.RunDemo(ctx, cfg, out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, sum)
	if !sum.Interrupted && !sum.OK() {
		return errors.New("demo sensors: verification failed")
	}
	return nil
}

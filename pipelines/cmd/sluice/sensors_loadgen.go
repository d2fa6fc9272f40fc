package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/kafka"
)

// runSensorsLoadgen produces the sensors workload to a real cluster and
// prints the rate it achieved.
func runSensorsLoadgen(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("loadgen sensors", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	topic := fs.String("topic", sensors.DefaultTopic, "topic to produce the readings to")
	homes := fs.Int("homes", 100_000, "homes, each with one sensor of each kind sending a reading per simulated minute")
	kinds := fs.Int("kinds", 3, fmt.Sprintf("kinds of sensor at the start (1 to %d: motion, door, glass, co)", sensors.NumKinds))
	addKindAfter := fs.Duration("add-kind-after", 0, "add the next kind to every home after this long: the rate rises by a kind's share (0: never)")
	compression := fs.Float64("compression", 60, "simulated time per real time (60: a simulated minute per second)")
	minutes := fs.Int("minutes", 0, "stop after this many simulated minutes (0: see -duration)")
	dur := fs.Duration("duration", 0, "stop after this long (0 and -minutes 0: until interrupted). With either, the simulated time starts "+
		"as far back as the run lasts, and ends at the clock; until interrupted, it starts an hour back")
	malformed := fs.Float64("malformed", 0.001, "share of readings sent malformed (dead letters)")
	late := fs.Float64("late", 0.001, "share of readings sent 5 simulated minutes late (dead letters)")
	outOfRange := fs.Float64("out-of-range", 0.0005, "share of readings with a value their kind cannot report (filtered)")
	seed := fs.Int("seed", 1, "seed of the random choices: a run is repeatable")
	every := fs.Duration("status-every", 5*time.Second, "how often a progress line is printed (0: never)")
	if err := parseFlags("loadgen sensors", fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loadgen sensors: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *homes < 1:
		return fmt.Errorf("-homes %d: want at least 1", *homes)
	case *kinds < 1 || *kinds > sensors.NumKinds:
		return fmt.Errorf("-kinds %d: want 1 to %d", *kinds, sensors.NumKinds)
	case *addKindAfter < 0:
		return fmt.Errorf("-add-kind-after %v: must not be negative", *addKindAfter)
	case *compression <= 0 || math.IsInf(*compression, 0) || math.IsNaN(*compression):
		return fmt.Errorf("-compression %v: want more than 0", *compression)
	case *minutes < 0:
		return fmt.Errorf("-minutes %d: must not be negative", *minutes)
	case *dur < 0:
		return fmt.Errorf("-duration %v: must not be negative", *dur)
	case *minutes > 0 && *dur > 0:
		return fmt.Errorf("-minutes %d and -duration %v: give one of them", *minutes, *dur)
	case *every < 0:
		return fmt.Errorf("-status-every %v: must not be negative", *every)
	case *seed < 1:
		return fmt.Errorf("-seed %d: want at least 1", *seed)
	}
	if err := checkShares(*malformed, *late, *outOfRange); err != nil {
		return err
	}
	// The generator reads a zero share as its default: a share asked to be
	// 0 is given as the smallest one there is, which no draw falls under.
	share := func(v float64) float64 {
		if v == 0 {
			return math.SmallestNonzeroFloat64
		}
		return v
	}
	gcfg := sensors.GenConfig{Topic: *topic, Homes: *homes, Kinds: *kinds, AddKindAfter: *addKindAfter, Compression: *compression,
		Malformed: share(*malformed), Late: share(*late), OutOfRange: share(*outOfRange), Seed: uint64(*seed)}
	// Simulated time runs Compression times faster than the clock: a run
	// of known length starts that far back, so that it ends at the
	// clock, not after it (a broker may refuse timestamps ahead of its
	// clock: Kafka 4 by default an hour ahead). A run until interrupted
	// starts an hour back, the generator's default.
	span := time.Duration(*minutes) * time.Minute
	if *dur > 0 {
		span = time.Duration(float64(*dur) * *compression)
	}
	if span > 0 {
		gcfg.Start = time.Now().Add(-span - time.Minute).Truncate(time.Minute)
	}
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, cl, *topic)
	cancel()
	if err != nil {
		return err
	}
	runCtx := ctx
	if *dur > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	// The rate the settings ask for: a reading per sensor per simulated
	// minute, and a heartbeat per home every 5.
	want := func(k int) float64 { return float64(*homes) * (float64(k) + 0.2) * *compression / 60 }
	fmt.Fprintf(out, "sending the readings of %d homes (%d kinds of sensor) to %s at compression %v: %.0f readings/s, simulated time from %s\n",
		*homes, *kinds, *topic, *compression, want(*kinds), gen.SimNow().UTC().Format(time.RFC3339))
	if span == 0 {
		fmt.Fprintf(out, "  (until interrupted: simulated time reaches the clock after %v, then runs at the real rate, %.0f readings/s)\n",
			time.Duration(float64(time.Hour) / *compression).Round(time.Second), want(*kinds) / *compression)
	}
	return followSensorsLoad(runCtx, gen, cl, *minutes, *every, want, out)
}

// followSensorsLoad runs the generator until it has sent minutes of
// simulated time or ctx ends, printing its progress every interval, and
// then what it sent.
func followSensorsLoad(ctx context.Context, gen *sensors.Generator, cl *kgo.Client, minutes int, every time.Duration,
	want func(kinds int) float64, out io.Writer) error {
	began := time.Now()
	var err error
	done := make(chan error, 1)
	go func() { done <- gen.Run(ctx, cl, minutes) }()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	last, lastAt := int64(0), began
	for {
		select {
		case now := <-tick:
			sent := gen.Sent()
			fmt.Fprintf(out, "%6.1fs sent %d (%.0f/s, want %.0f/s), simulated %s, kinds %d\n", now.Sub(began).Seconds(), sent,
				float64(sent-last)/now.Sub(lastAt).Seconds(), want(gen.Kinds()), gen.SimNow().UTC().Format(time.RFC3339), gen.Kinds())
			last, lastAt = sent, now
			continue
		case err = <-done:
		}
		break
	}
	took := time.Since(began)
	valid, mal, lt, oor, hb := gen.Expected.Counts()
	fmt.Fprintf(out, "sent %d records in %v: %.0f/s (%d valid readings, %d malformed, %d late, %d out of range, %d heartbeats), simulated time %s\n",
		gen.Sent(), took.Round(time.Millisecond), float64(gen.Sent())/max(took.Seconds(), 1e-9), valid, mal, lt, oor, hb,
		gen.SimNow().UTC().Format(time.RFC3339))
	return err
}

// checkShares checks the shares of bad readings: each, and all of them
// together, at most a half.
func checkShares(malformed, late, outOfRange float64) error {
	for _, s := range []struct {
		name string
		v    float64
	}{{"malformed", malformed}, {"late", late}, {"out-of-range", outOfRange}} {
		if s.v < 0 || s.v > 0.5 || math.IsNaN(s.v) {
			return fmt.Errorf("-%s %v: want a share from 0 to 0.5", s.name, s.v)
		}
	}
	if sum := malformed + late + outOfRange; sum > 0.5 {
		return fmt.Errorf("-malformed %v, -late %v, -out-of-range %v: together %v, want at most 0.5", malformed, late, outOfRange, sum)
	}
	return nil
}

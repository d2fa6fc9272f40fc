package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// runLoadgen produces delivery requests to a real cluster.
func runLoadgen(ctx context.Context, args []string) error {
	_, err := loadgenCmd(ctx, args)
	return err
}

// loadgenCmd is runLoadgen returning the record of what it sent.
func loadgenCmd(ctx context.Context, args []string) (*loadgen.Sent, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	topic := fs.String("topic", env("SLUICE_REQUESTS_TOPIC", "delivery-requests"), "topic to produce to")
	rate := fs.Float64("rate", 10_000, "requests per second")
	burst := fs.Float64("burst", 50_000, "request rate during bursts (0: none); seed 002's peaks are 50,000/s")
	every := fs.Duration("burst-every", 10*time.Second, "a burst starts this often")
	burstFor := fs.Duration("burst-for", 3*time.Second, "and lasts this long")
	dur := fs.Duration("duration", time.Minute, "how long to send")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.ProducerLinger(2*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	cfg := loadgen.Default(*topic, *rate, *dur)
	if *burst > 0 {
		cfg.BurstRate, cfg.BurstEvery, cfg.BurstFor = *burst, *every, *burstFor
	}
	sent := loadgen.NewSent()
	began := time.Now()
	err = loadgen.Run(ctx, cl, cfg, sent)
	kinds, dups := sent.Kinds()
	count := map[loadgen.Kind]int{}
	for _, k := range kinds {
		count[k]++
	}
	fmt.Printf("sent %d requests in %v (%d duplicates): deliverable %d, undeliverable %d, malformed %d, invalid %d, suspended owner %d\n",
		sent.Total(), time.Since(began).Round(time.Millisecond), dups, count[loadgen.Deliverable], count[loadgen.Undeliverable],
		count[loadgen.Malformed], count[loadgen.Invalid], count[loadgen.Suspended])
	return sent, err
}

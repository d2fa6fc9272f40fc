package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is one run of the benchmark against brokers that are already up.
type Config struct {
	Brokers  []string
	Workload Workload
	Inflight int           // -inflight of every implementation
	Work     time.Duration // -work
	Impls    []string      // names of DefaultImpls
	Orders   []string      // "unordered", "key"
	// Timeout bounds each run from its first record to committed == end.
	Timeout time.Duration
	// Root is the repository; Logs a folder for each run's stderr.
	Root, Logs string
	// ExtraArgs, if set, returns flags to add to an implementation's in
	// an order (-cpuprofile); nil: none.
	ExtraArgs func(impl, order string) []string
	// GoBuildFlags are added to go build of the Go implementations (the
	// test builds them with -race when it runs with it); default none.
	GoBuildFlags []string
	// Progress receives a line per step; nil: none.
	Progress io.Writer
}

// Row is one implementation in one order.
type Row struct {
	Impl, Order string
	// Status is "ok", "failed", "not built" or "build failed"; Detail
	// says why when not ok.
	Status, Detail string
	Seconds        float64 // first record to committed == end
	RecordsPerSec  float64
	CPUusPerRecord float64
	P50MS, P99MS   float64
	P99InprocMS    float64
	Processed      int64
	Duplicates     int64
	Check          string // "pass", or what is short
	Passed         bool
	Semantics      string
	Notes          string
}

func (r Row) failed(format string, a ...any) Row {
	r.Status, r.Detail = "failed", fmt.Sprintf(format, a...)
	return r
}

// Run fills the topic once, then runs every implementation in every order,
// one process at a time, and returns the rows in that order. An
// implementation that is not built or fails gets rows that say so; Run
// itself fails only when the topic cannot be made.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	say := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "peers: "+format+"\n", a...)
		}
	}
	began := time.Now()
	ends, err := produce(ctx, cfg.Brokers, cfg.Workload)
	if err != nil {
		return nil, err
	}
	say("topic %s: %d records in %d partitions, produced in %v", cfg.Workload.Topic, cfg.Workload.Records, cfg.Workload.Partitions, time.Since(began).Round(time.Millisecond))
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	bin, err := os.MkdirTemp("", "sluice-peers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bin)
	var rows []Row
	for _, impl := range cfg.Impls {
		say("%s: building", impl)
		argv, err := build(ctx, cfg.Root, bin, impl, cfg.GoBuildFlags)
		for _, order := range cfg.Orders {
			row := Row{Impl: impl, Order: order}
			switch {
			case errors.Is(err, ErrNotBuilt):
				row.Status, row.Detail = "not built", err.Error()
			case err != nil:
				row.Status, row.Detail = "build failed", err.Error()
			default:
				say("%s %s: running", impl, order)
				row = runOne(ctx, cfg, adm, ends, argv, row)
			}
			say("%s %s: %s %s", impl, order, row.Status, firstLine(row.Detail))
			rows = append(rows, row)
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
		}
	}
	return rows, nil
}

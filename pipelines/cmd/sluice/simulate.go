package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/ownsim"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// runSimulateOwnership runs groups of ownership balancers through the
// scenarios of a large deployment and prints what they measured.
func runSimulateOwnership(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("simulate ownership", flag.ContinueOnError)
	members := fs.Int("members", 500, "instances sharing the partitions (each a real balancer)")
	partitions := fs.Int("partitions", 4096, "partitions of the stream")
	scenario := fs.String("scenario", "all", "the scenario to run: all, or one of "+strings.Join(ownsim.Scenarios, ", "))
	interval := fs.Duration("interval", 0, "the renewal interval (default 10s with -store mem, 1s with -store redis, whose runs take real time)")
	expiration := fs.Duration("expiration", 0, "how long a lease lasts without renewal (default 3 x -interval)")
	strategy := fs.String("strategy", "balanced", "how much an instance claims a round: balanced (free partitions up to its share; from each owner above its share, its excess divided among the instances below theirs) or greedy (every partition it lacks)")
	seed := fs.Int64("seed", 1, "picks the instances that leave, crash or are slow, and their random choices: the same value gives the same figures with -store mem")
	store := fs.String("store", "mem", "where the leases live: mem (in memory, simulated time: any size in seconds) or redis (a real Redis in real time)")
	redisURL := fs.String("redis", "127.0.0.1:6379", "-store redis: host:port or redis://[user:password@]host:port[/db]; the runs write under a namespace of their own, removed at the end")
	if err := parseFlags("simulate ownership", fs, args); err != nil {
		return err
	}
	if *members < 1 {
		return fmt.Errorf("simulate ownership: -members %d: want at least 1", *members)
	}
	if *partitions < 1 {
		return fmt.Errorf("simulate ownership: -partitions %d: want at least 1", *partitions)
	}
	if *interval < 0 {
		return fmt.Errorf("simulate ownership: -interval %v: want more than 0", *interval)
	}
	if *scenario != "all" && !slices.Contains(ownsim.Scenarios, *scenario) {
		return fmt.Errorf("simulate ownership: -scenario %q: want all, %s", *scenario, strings.Join(ownsim.Scenarios, ", "))
	}
	if *interval == 0 {
		*interval = 10 * time.Second
		if *store == "redis" {
			*interval = time.Second
		}
	}
	if *expiration != 0 && *expiration < 3**interval {
		return fmt.Errorf("simulate ownership: -expiration %v: want at least 3 x -interval (%v), so that a lease survives a failed renewal", *expiration, 3**interval)
	}
	cfg := ownsim.Config{Members: *members, Partitions: *partitions, Interval: *interval, Expiration: *expiration, Seed: uint64(*seed)}
	switch *strategy {
	case "balanced":
		cfg.Strategy = ownership.Balanced
	case "greedy":
		cfg.Strategy = ownership.Greedy
	default:
		return fmt.Errorf("simulate ownership: -strategy %q: want balanced or greedy", *strategy)
	}
	scenarios := ownsim.Scenarios
	if *scenario != "all" {
		scenarios = []string{*scenario}
	}
	switch *store {
	case "mem":
	case "redis":
		rc, opts, err := openRedis(ctx, *redisURL, "")
		if err != nil {
			return err
		}
		defer rc.Close()
		cfg.Store = redisRuns(rc)
		defer removeRuns(context.WithoutCancel(ctx), rc)
		fmt.Fprintf(w, "real time against %s, interval %v (compare rounds, not seconds, with a simulated run)\n",
			describeRedis(opts), cfg.Interval)
	default:
		return fmt.Errorf("simulate ownership: -store %q: want mem or redis", *store)
	}
	var rs []ownsim.Result
	for _, sc := range scenarios {
		r, err := ownsim.Run(ctx, cfg, sc)
		if err != nil {
			return fmt.Errorf("simulate ownership: %w", err)
		}
		rs = append(rs, r)
	}
	return ownsim.WriteTable(w, rs)
}

// simNamespace prefixes the namespaces the runs write under.
const simNamespace = "sluice-simulate-"

// redisRuns returns stores in Redis, one namespace per run.
func redisRuns(rc *redis.Client) func(context.Context, string, time.Duration) (ownership.Store, error) {
	return func(_ context.Context, run string, exp time.Duration) (ownership.Store, error) {
		return redisstore.New(redisstore.Config{Client: rc, Namespace: simNamespace + run, Stream: "s", Group: "g", Expiration: exp})
	}
}

// removeRuns deletes the records the runs wrote.
func removeRuns(ctx context.Context, rc *redis.Client) {
	iter := rc.Scan(ctx, 0, "sluice:own:{"+simNamespace+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			rc.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rc.Del(ctx, keys...)
	}
}

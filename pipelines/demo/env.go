package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// cleanups are what a run closes when it ends, last started first.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// startBroker returns the brokers to run against: the configured cluster,
// its topics created if missing, or an embedded one with the topics seeded.
func startBroker(ctx context.Context, cfg Config, cl *cleanups) ([]string, error) {
	if len(cfg.Brokers) > 0 {
		topics := map[string]int32{topicFailures: 4, topicDead: 1, topicParked: 4, topicRetry: 4, topicSupervisorDead: 1}
		for _, t := range topicLevels {
			topics[t] = cfg.Partitions
		}
		return cfg.Brokers, createTopics(ctx, cfg.Brokers, topics)
	}
	// Each level's topic has the partitions of the requests: each can take
	// the whole load.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, topicLevels[:]...),
		kfake.SeedTopics(4, topicFailures), kfake.SeedTopics(1, topicDead), kfake.SeedTopics(4, topicParked),
		kfake.SeedTopics(4, topicRetry), kfake.SeedTopics(1, topicSupervisorDead))
	if err != nil {
		return nil, fmt.Errorf("starting the embedded broker: %w", err)
	}
	cl.add(cluster.Close)
	return cluster.ListenAddrs(), nil
}

// startBackends returns the services the workers call (simulated,
// in-process or behind HTTP) and, with Redis, the step records that make
// the drone step safe to redo (mode b). An embedded Redis sets cfg.Redis
// to its address.
func startBackends(ctx context.Context, cfg *Config, ledger *delivery.Ledger, w io.Writer, cl *cleanups) (delivery.Backends, delivery.StepStore, error) {
	backends := delivery.Simulated(cfg.Sim, ledger, loadgen.SuspendedOwner)
	var steps delivery.StepStore
	embedded := cfg.Redis == EmbeddedRedis
	if embedded {
		mr, err := miniredis.Run()
		if err != nil {
			return backends, nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		cl.add(mr.Close)
		cfg.Redis = mr.Addr()
		fmt.Fprintf(w, "step records: embedded Redis (miniredis) on %s\n", cfg.Redis)
	}
	if cfg.Redis != "" {
		rc := redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: 64})
		cl.add(func() { _ = rc.Close() })
		if err := delivery.CheckRedis(ctx, rc); err != nil {
			return backends, nil, fmt.Errorf("redis at %s: %w", cfg.Redis, err)
		}
		rs := delivery.NewRedisSteps(rc, time.Hour)
		cl.add(rs.Close)
		steps = rs
		if embedded {
			steps = newAgedSteps(rs, time.Now) // its own clock leaves every mark 0 s old
		}
		backends = delivery.SimulatedNonIdempotent(cfg.Sim, ledger, loadgen.SuspendedOwner)
		fmt.Fprintf(w, "mode b: drone scheduling is not idempotent; step records in Redis at %s\n", cfg.Redis)
	}
	if cfg.HTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return backends, nil, err
		}
		srv := &http.Server{Handler: delivery.HTTPHandler(backends), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		cl.add(func() { _ = srv.Close() })
		// One client for every incarnation, two at once during a restart.
		calls := 2 * (delivery.MaxCalls(delivery.DefaultParallelism) + supervisor.MaxCalls)
		backends = delivery.HTTPBackends("http://"+ln.Addr().String(), delivery.NewHTTPClient(calls))
		fmt.Fprintf(w, "backends: HTTP services on %s\n", ln.Addr())
	}
	return backends, steps, nil
}

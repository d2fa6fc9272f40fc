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

// startEmbeddedRedis starts the embedded Redis (miniredis) if cfg.Redis
// asks for it, once, and sets cfg.Redis to its address.
func startEmbeddedRedis(cfg *Config, w io.Writer, cl *cleanups) error {
	if cfg.Redis != EmbeddedRedis {
		return nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("starting the embedded Redis: %w", err)
	}
	cl.add(mr.Close)
	cfg.Redis, cfg.redisEmbedded = mr.Addr(), true
	what := "step records"
	if cfg.Transport == TransportRedis {
		what = "streams and step records"
	}
	fmt.Fprintf(w, "%s: embedded Redis (miniredis) on %s\n", what, cfg.Redis)
	if cfg.Transport == TransportRedis {
		fmt.Fprintln(w, "  (a server inside this process, slower than redis-server: -redis host:port runs on one)")
	}
	return nil
}

// redisClient returns a client of the server of cfg.Redis, with
// cfg.RedisOptions if set, and connections for the workers' 64 calls at
// once.
func (cfg *Config) redisClient() *redis.Client {
	opts := &redis.Options{Addr: cfg.Redis}
	if cfg.RedisOptions != nil && !cfg.redisEmbedded {
		o := *cfg.RedisOptions
		opts = &o
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 64
	}
	return redis.NewClient(opts)
}

// startBackends returns the services the workers call (simulated,
// in-process or behind HTTP) and, with Redis, the step records that make
// the drone step safe to redo (mode b). An embedded Redis sets cfg.Redis
// to its address.
func startBackends(ctx context.Context, cfg *Config, ledger *delivery.Ledger, w io.Writer, cl *cleanups) (delivery.Backends, delivery.StepStore, error) {
	backends := delivery.Simulated(cfg.Sim, ledger, loadgen.SuspendedOwner)
	var steps delivery.StepStore
	if err := startEmbeddedRedis(cfg, w, cl); err != nil {
		return backends, nil, err
	}
	if cfg.Redis != "" {
		rc := cfg.redisClient()
		cl.add(func() { _ = rc.Close() })
		if err := delivery.CheckRedis(ctx, rc); err != nil {
			return backends, nil, fmt.Errorf("redis at %s: %w", cfg.Redis, err)
		}
		rs := delivery.NewRedisSteps(rc, time.Hour)
		cl.add(rs.Close)
		steps = rs
		if cfg.redisEmbedded {
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

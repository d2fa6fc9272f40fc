package demo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/demo"
)

// TestDemoOnRedisSurvivesCrashes is TestDemoSurvivesCrashes (at half its
// rate) with every topic on the Redis streams of an embedded Redis: each
// incarnation is a consumer of its own, and takes over what the crashed
// one had read and not settled once it has been idle for 2 s.
func TestDemoOnRedisSurvivesCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes the demo's workers on Redis streams during a run: make test runs it, -short does not")
	}
	cfg := demo.Defaults(4 * time.Second)
	cfg.Transport = demo.TransportRedis
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 500, 0, 0
	cfg.Sim.TransientRate, cfg.Sim.ThrottleRate = 0.05, 0.01
	cfg.Every, cfg.Restarts, cfg.Drain = time.Second, 3, 30*time.Second
	sum, out := runDemo(t, cfg)
	if !sum.OK() || sum.Completed == 0 || strings.Count(out, "crashed and restarted") != 3 || !strings.Contains(out, "Redis streams") {
		t.Fatalf("verification failed: %s", sum)
	}
}

// TestDemoOnRedisServer runs the demo's streams and step records on a real
// redis-server: Transport redis with Config.Redis its address.
func TestDemoOnRedisServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo on a redis-server for seconds: make test runs it, -short does not")
	}
	cfg := demo.Defaults(3 * time.Second)
	cfg.Transport, cfg.Redis = demo.TransportRedis, testenv.Redis(t)
	cfg.Rate, cfg.BurstRate, cfg.BurstEvery = 1000, 0, 0
	cfg.Sim.TransientRate, cfg.Sim.ThrottleRate = 0.05, 0.01
	cfg.Every, cfg.Drain = time.Second, 30*time.Second
	sum, out := runDemo(t, cfg)
	if !sum.OK() || sum.Completed == 0 || !strings.Contains(out, "transport: Redis streams on "+cfg.Redis) {
		t.Fatalf("verification failed: %s", sum)
	}
}

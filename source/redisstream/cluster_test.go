package redisstream_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// startCluster starts a one-node Redis Cluster on loopback holding every
// slot, stopped when the test ends, and returns its address.
func startCluster(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: make test installs it (or: sudo apt-get install -y redis-server)")
	}
	// Two free ports, the clients' and the cluster bus', held until both
	// are chosen so that they differ, then freed for the server.
	var ports [2]int
	var lns []net.Listener
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, ln := range lns {
		ln.Close()
	}
	port := ports[0]
	dir := t.TempDir()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(ports[1]), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", dir+"/nodes.conf", "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	waitFor(t, "the cluster node to answer", func() bool { return c.Ping(ctx).Err() == nil })
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cluster to be up", func() bool {
		info, err := c.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return addr
}

// In a Redis Cluster a dead letter is written in one script with the
// acknowledgement of its entry, so the dead-letter stream must be in its
// stream's hash slot; the default name, <stream>-dead-letters, is only
// when the stream's name has a hash tag. New says so, naming the field,
// instead of a Run that stops at the first malformed entry (CROSSSLOT),
// and again at each restart, with the entry stuck at the head.
func TestNewOnAClusterRefusesADeadLetterStreamInAnotherSlot(t *testing.T) {
	addr := startCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()

	src, err := redisstream.New(ctx, redisstream.Config{Client: c, Streams: []string{"orders"}, Group: "g", Consumer: "c", Create: true})
	var ce *stream.ConfigError
	if !errors.As(err, &ce) || ce.Argument != "DeadLetter" || !strings.Contains(err.Error(), "orders-dead-letters") {
		if src != nil {
			_ = src.Close(ctx)
		}
		t.Fatalf("New with the dead-letter stream of orders in another slot = %v, want a *stream.ConfigError naming DeadLetter and orders-dead-letters", err)
	}

	// A stream with a hash tag, and its default dead-letter stream, are fine.
	src, err = redisstream.New(ctx, redisstream.Config{Client: c, Streams: []string{"{orders}"}, Group: "g", Consumer: "c", Create: true,
		Block: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New of {orders} = %v", err)
	}
	defer src.Close(ctx)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "{orders}", Values: []any{"data", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	r := run(t, src, true)
	waitFor(t, "the malformed entry dead-lettered", func() bool { return c.XLen(ctx, "{orders}-dead-letters").Val() == 1 })
	r.stop()
	if err := <-r.done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	r.done <- nil
}

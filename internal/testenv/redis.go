package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Redis starts a real redis-server (Debian package redis-server) on a free
// loopback port, without persistence, and returns its address. It is
// stopped when the test ends. A missing redis-server fails the test with
// the command that installs it.
func Redis(t testing.TB) string {
	t.Helper()
	return StartRedis(t).Addr
}

// RedisServer is a redis-server that a test can stop and start again on
// the same address, to make an outage.
type RedisServer struct {
	Addr string
	t    testing.TB
	path string
	port int
	dir  string // durable: its append-only file, kept across Stop and Start
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// StartRedis is Redis, with the server's handle.
func StartRedis(t testing.TB) *RedisServer { t.Helper(); return startRedis(t, false) }

// StartDurableRedis is StartRedis with every write in an append-only file
// synced before it is acknowledged (appendfsync always): a Stop, however
// abrupt, loses nothing, and Start finds the data again — an outage, not
// a loss.
func StartDurableRedis(t testing.TB) *RedisServer { t.Helper(); return startRedis(t, true) }

func startRedis(t testing.TB, durable bool) *RedisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: apt-get install -y redis-server (.ci/run does)")
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), t: t, path: path, port: ports[0]}
	if durable {
		r.dir = t.TempDir()
	}
	t.Cleanup(r.Stop)
	r.Start()
	return r
}

// Start starts the server again after Stop (with its data if it is
// durable; otherwise the data is gone) and waits until it answers PING.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	args := []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(r.port), "--save", "", "--protected-mode", "yes"}
	if r.dir != "" {
		args = append(args, "--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(r.path, args...)
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", r.Addr, 200*time.Millisecond); err == nil {
			fmt.Fprintf(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer within 10 s", r.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: an outage, not a shutdown).
func (r *RedisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

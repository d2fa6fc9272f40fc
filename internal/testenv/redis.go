package testenv

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
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
	auth RedisAuth
	// CAFile is the PEM file of the CA that signed a TLS server's
	// certificate (RedisAuth.TLS), for the client to trust.
	CAFile  string
	certDir string
	mu      sync.Mutex
	cmd     *exec.Cmd
}

// StartRedis is Redis, with the server's handle.
func StartRedis(t testing.TB) *RedisServer { t.Helper(); return startRedis(t, false) }

// StartDurableRedis is StartRedis with every write in an append-only file
// synced before it is acknowledged (appendfsync always): a Stop, however
// abrupt, loses nothing, and Start finds the data again — an outage, not
// a loss.
func StartDurableRedis(t testing.TB) *RedisServer { t.Helper(); return startRedis(t, true) }

// RedisAuth is how a server started by StartRedisWith lets clients in.
type RedisAuth struct {
	// Password, if set, is required: of the default user, or of User.
	Password string
	// User, if set, is an ACL user with every right, and the default user
	// is turned off.
	User string
	// TLS: the server speaks only TLS, with a certificate for 127.0.0.1
	// signed by a CA of its own (CAFile).
	TLS bool
}

// StartRedisWith is StartRedis with authentication and TLS.
func StartRedisWith(t testing.TB, auth RedisAuth) *RedisServer {
	t.Helper()
	return startRedisWith(t, false, auth)
}

func startRedis(t testing.TB, durable bool) *RedisServer {
	t.Helper()
	return startRedisWith(t, durable, RedisAuth{})
}

func startRedisWith(t testing.TB, durable bool, auth RedisAuth) *RedisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: make test installs it (or: sudo apt-get install -y redis-server)")
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisServer{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), t: t, path: path, port: ports[0], auth: auth}
	if durable {
		r.dir = t.TempDir()
	}
	if auth.TLS {
		r.certDir = t.TempDir()
		if err := writeCerts(r.certDir); err != nil {
			t.Fatal(err)
		}
		r.CAFile = filepath.Join(r.certDir, "ca.pem")
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
	switch a := r.auth; {
	case a.User != "":
		args = append(args, "--user", "default", "off", "--user", a.User, "on", ">"+a.Password, "~*", "&*", "+@all")
	case a.Password != "":
		args = append(args, "--requirepass", a.Password)
	}
	if r.auth.TLS {
		args = append(args, "--port", "0", "--tls-port", fmt.Sprint(r.port), "--tls-auth-clients", "no",
			"--tls-cert-file", filepath.Join(r.certDir, "server.pem"), "--tls-key-file", filepath.Join(r.certDir, "server-key.pem"),
			"--tls-ca-cert-file", r.CAFile)
	}
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
			if r.auth.TLS {
				c = tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // only to see it answer
			}
			_ = c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			// A server wanting a password answers -NOAUTH: it is up.
			if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
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

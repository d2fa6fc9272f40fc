//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/internal/testenv"
)

// upProcess is a `sluice up` started by a test, and what it printed.
type upProcess struct {
	cmd    *exec.Cmd
	tmp    string // its TMPDIR, where it makes its directory
	mu     sync.Mutex
	out    strings.Builder
	lines  chan string
	exited chan struct{}
}

// startUp starts `sluice up` on free ports and waits until it has printed
// the load to try.
func startUp(t *testing.T, bin string) *upProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: make test installs it (or: sudo apt-get install -y redis-server)")
	}
	u := &upProcess{tmp: t.TempDir(), lines: make(chan string, 100), exited: make(chan struct{})}
	u.cmd = exec.Command(bin, "up", "-broker-port", "0", "-redis-port", "0", "-services-listen", "127.0.0.1:0",
		"-admin-listen", "127.0.0.1:0", "-delivery-listen", "127.0.0.1:0", "-supervisor-listen", "127.0.0.1:0")
	u.cmd.Env = append(os.Environ(), "TMPDIR="+u.tmp, "SLUICE_BROKERS=")
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u.cmd.Stderr = u.cmd.Stdout
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go u.read(stdout)
	t.Cleanup(func() {
		if !u.done() {
			_ = u.cmd.Process.Kill() // its parts get SIGTERM from the kernel (Pdeathsig)
			<-u.exited
		}
		if t.Failed() {
			t.Logf("sluice up printed:\n%s", u.output())
		}
	})
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case line := <-u.lines:
			if strings.HasPrefix(line, "Ctrl-C stops every part") {
				return u
			}
		case <-u.exited:
			t.Fatalf("sluice up exited at start: %v", u.cmd.ProcessState)
		case <-deadline:
			t.Fatal("sluice up not ready within 2 minutes")
		}
	}
}

func (u *upProcess) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		u.mu.Lock()
		u.out.WriteString(sc.Text() + "\n")
		u.mu.Unlock()
		select {
		case u.lines <- sc.Text():
		default:
		}
	}
	_ = u.cmd.Wait()
	close(u.exited)
}

func (u *upProcess) output() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.out.String()
}

func (u *upProcess) done() bool {
	select {
	case <-u.exited:
		return true
	default:
		return false
	}
}

var upPID = regexp.MustCompile(`^  (\S+) .*\(pid (\d+)\)$`)

// pids are the parts' process ids, by name, as sluice up printed them.
func (u *upProcess) pids(t *testing.T) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, line := range strings.Split(u.output(), "\n") {
		if m := upPID.FindStringSubmatch(line); m != nil {
			pids[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	for _, name := range []string{"broker", "services", "redis", "supervisor", "delivery"} {
		if pids[name] == 0 {
			t.Fatalf("sluice up printed no pid for %s:\n%s", name, u.output())
		}
	}
	return pids
}

// command is the printed command line of the sluice subcommand sub, as
// arguments after the program.
func (u *upProcess) command(t *testing.T, sub string) []string {
	t.Helper()
	for _, line := range strings.Split(u.output(), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == sub {
			return f[1:]
		}
	}
	t.Fatalf("sluice up printed no %s command:\n%s", sub, u.output())
	return nil
}

// awaitExit waits up to limit for sluice up to end.
func (u *upProcess) awaitExit(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-u.exited:
	case <-time.After(limit):
		t.Fatalf("sluice up still running %v after it was told to stop", limit)
	}
}

// gone fails t for each of pids still running.
func gone(t *testing.T, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still there after sluice up ended: kill -0: %v", name, pid, err)
		}
	}
}

// `sluice up` starts the whole system; the load it prints runs against
// it and verifies (every request completed, compensated or dead-lettered,
// none lost or applied twice); Ctrl-C stops every part, redis-server
// included, and the run's temporary directory goes.
func TestUpRunsTheSystemAndStopsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the system as processes with load: not in -short")
	}
	bin := deployed.Build(t)
	u := startUp(t, bin)
	pids := u.pids(t)
	work := t.TempDir()
	load := exec.Command(bin, append(u.command(t, "loadgen"), "-duration", "3s")...)
	load.Dir = work
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", load.Args, err, out)
	}
	verify := exec.Command(bin, append(u.command(t, "verify"), "-wait", "2m")...)
	verify.Dir = work
	out, err := verify.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verification PASS") {
		t.Fatalf("%v: %v\n%s", verify.Args, err, out)
	}
	t.Logf("%s", out)

	if err := u.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	u.awaitExit(t, 3*time.Minute)
	if !u.cmd.ProcessState.Success() {
		t.Fatalf("sluice up ended with %v after Ctrl-C", u.cmd.ProcessState)
	}
	gone(t, pids)
	for _, name := range []string{"delivery", "supervisor", "redis", "services", "broker"} {
		if !strings.Contains(u.output(), "stopped "+name) {
			t.Errorf("sluice up did not report %s stopped", name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(u.tmp, "*")); len(left) > 0 {
		t.Errorf("sluice up left %v after a clean stop", left)
	}
}

// A part that dies is reported with how it ended, and sluice up stops
// the others and exits 1, keeping the logs.
func TestUpStopsEverythingWhenAPartDies(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the system as processes: not in -short")
	}
	u := startUp(t, deployed.Build(t))
	pids := u.pids(t)
	if err := syscall.Kill(pids["supervisor"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	u.awaitExit(t, 3*time.Minute)
	if code := u.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("sluice up exited %d after its supervisor was killed, want 1", code)
	}
	gone(t, pids)
	out := u.output()
	if !strings.Contains(out, "supervisor (pid "+strconv.Itoa(pids["supervisor"])+") exited on its own: signal: killed") {
		t.Errorf("the supervisor's end is not reported:\n%s", out)
	}
	if !strings.Contains(out, "the logs are in "+u.tmp) {
		t.Errorf("the logs' directory is not named:\n%s", out)
	}
	if _, err := net.DialTimeout("tcp", u.command(t, "loadgen")[2], time.Second); err == nil {
		t.Error("the broker still answers")
	}
}

// A port of the defaults already taken (a demo, another sluice up) stops
// sluice up before it starts anything, naming the flag: otherwise the
// part's readiness would be asked of the program that holds its port.
func TestUpRefusesAPortInUse(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: make test installs it (or: sudo apt-get install -y redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("TMPDIR", t.TempDir())
	err = run([]string{"up", "-broker-port", "0", "-redis-port", "0", "-services-listen", "127.0.0.1:0",
		"-admin-listen", "127.0.0.1:0", "-delivery-listen", l.Addr().String(), "-supervisor-listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "-delivery-listen "+l.Addr().String()) ||
		!strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("sluice up with -delivery-listen taken: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "*")); len(left) > 0 {
		t.Errorf("sluice up left %v", left)
	}
}

// up's redis-server starts with its data in a directory whose name holds
// spaces, a quote and a backslash: the config quotes it. Found in review:
// written bare, "dir /tmp/my data/redis" is two arguments and redis-server
// refuses to start.
func TestUpRedisConfQuotesItsDirectory(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (make test installs it): %v", err)
	}
	dir := filepath.Join(t.TempDir(), `my data "x" \y`)
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o700); err != nil {
		t.Fatal(err)
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(redisConf(ports[0], "pw", filepath.Join(dir, "redis"))), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(server, conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	for redisAnswers(ctx, addr, "pw") != nil {
		if ctx.Err() != nil {
			t.Fatalf("redis-server did not answer with its data in %q:\n%s", dir, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "redis", "appendonlydir")); err != nil {
		t.Fatalf("no append-only data in %q: %v\n%s", dir, err, out.String())
	}
}

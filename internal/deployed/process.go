package deployed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// proc is a process and the end of its Wait.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// stop signals the process and waits up to limit for its end, then kills it.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Build builds the sluice binary into a temporary directory.
func Build(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sluice-streams/sluice/pipelines/cmd/sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building sluice: %v\n%s", err, out)
	}
	return bin
}

// spawn starts the binary with args, its output in a log file named name.
func (s *System) spawn(name string, args ...string) *proc {
	s.tb.Helper()
	return s.spawnBin(name, s.bin, args...)
}

// spawnBin starts the program bin with args, its output in a log file
// named name.
func (s *System) spawnBin(name, bin string, args ...string) *proc {
	s.tb.Helper()
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		s.tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	return p
}

// Run runs the binary with args to its end (`sluice loadgen`), its
// output in the log of name (from Name); its error ends with the tail of
// that log.
func (s *System) Run(ctx context.Context, name string, args ...string) error {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w (%s)", err, s.logTail(name))
	}
	return nil
}

// Name returns a fresh name for a process of kind — kind-1, kind-2, ...:
// its log's, and a prefix for the files it writes in Dir.
func (s *System) Name(kind string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[kind]++
	return fmt.Sprintf("%s-%d", kind, s.n[kind])
}

// Dir is the directory of the processes' logs, where they may also write
// their files (a load generator's record); it is removed when the test
// ends.
func (s *System) Dir() string { return s.dir }

func (s *System) await(what string, limit time.Duration, ok func() error) {
	s.tb.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("%s not up within %v: %v", what, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTail is the end of a process's log.
func (s *System) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
	return testenv.Tail(b, 2048)
}

// Log is a process's whole log ("delivery-1", "services", ...).
func (s *System) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
	return string(b)
}

func ports(tb testing.TB, n int) []int {
	tb.Helper()
	ps, err := testenv.FreePorts(n)
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}

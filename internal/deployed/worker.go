package deployed

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Worker is one incarnation of a worker process.
type Worker struct {
	Which  string
	Listen string // its metrics address
	p      *proc
}

// StartWorker starts an incarnation of the delivery or supervisor worker
// (with the same instance id as the last: static membership), with extra
// flags after the configured ones, and waits until it is ready.
func (s *System) StartWorker(which string, extra ...string) *Worker {
	s.tb.Helper()
	name := s.Name(which)
	listen := fmt.Sprintf("127.0.0.1:%d", ports(s.tb, 1)[0])
	// The same instance id for every incarnation: static membership on
	// Kafka; on Redis, the same consumer, which reads again at its start
	// what the one before had read and not finished.
	args := append([]string{"run", which, "-backends", s.Services, "-listen", listen, "-instance-id", which + "-0"}, s.Transport()...)
	if which == "delivery" {
		if !s.OnRedis() {
			args = append(args, "-redis", s.Redis.Addr)
		}
		args = append(args, s.cfg.Delivery...)
	}
	args = append(args, s.cfg.Worker...)
	args = append(args, extra...)
	return s.startReady(which, name, listen, s.spawn(name, args...))
}

// StartProgram starts bin, a worker written without sluice that stands in
// for which (its consumer group, its instance id), with args and -listen
// (its /readyz and /metrics), and waits until it is ready. It is then the
// running incarnation of which.
func (s *System) StartProgram(which, bin string, args ...string) *Worker {
	s.tb.Helper()
	name := s.Name(which)
	listen := fmt.Sprintf("127.0.0.1:%d", ports(s.tb, 1)[0])
	return s.startReady(which, name, listen, s.spawnBin(name, bin, append(args, "-listen", listen)...))
}

// startReady makes p the running incarnation of which and waits for its
// /readyz.
func (s *System) startReady(which, name, listen string, p *proc) *Worker {
	s.tb.Helper()
	w := &Worker{Which: which, Listen: listen, p: p}
	s.mu.Lock()
	s.workers[which] = w
	s.mu.Unlock()
	s.await(which+" worker", 60*time.Second, func() error {
		select {
		case <-w.p.done:
			s.tb.Fatalf("the %s worker exited at start: %v (log %s)", which, w.p.cmd.ProcessState, s.logTail(name))
		default:
		}
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %s", resp.Status)
		}
		return nil
	})
	return w
}

// Worker returns the running incarnation of which.
func (s *System) Worker(which string) *Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers[which]
}

// Alive reports whether the incarnation is still running.
func (w *Worker) Alive() bool {
	select {
	case <-w.p.done:
		return false
	default:
		return true
	}
}

// PeakRSS is the incarnation's peak resident set size in bytes (VmHWM of
// /proc/<pid>/status), 0 if it cannot be read (the process ended, or no
// /proc). Read it before Stop.
func (w *Worker) PeakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// Stop ends the incarnation with sig (SIGKILL: a crash; SIGTERM: a
// drain) and returns the CPU time it used (user and system).
func (w *Worker) Stop(sig syscall.Signal) time.Duration {
	w.p.stop(sig, 30*time.Second)
	st := w.p.cmd.ProcessState
	return st.UserTime() + st.SystemTime()
}

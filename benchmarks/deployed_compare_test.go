package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/deployment"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// runCompare is BenchmarkDeliveryDeployed/compare: the scheduler written
// by hand (benchmarks/handwritten/scheduler: a franz-go consumer group, a
// pool of goroutines, the five calls with retries in place, the drone
// step recorded in Redis, compensation events and dead letters as the
// sluice scheduler writes them, commits of contiguous done offsets) and
// `sluice run delivery` (default flags), rate by rate, taking turns at
// going first (the hand-written worker first at 500 and max, sluice at
// 1,000 and backlog; SLUICE_COMPARE_SLUICE_FIRST swaps every pair), each
// pair run again in the other order (SLUICE_COMPARE_ROUNDS, default 2:
// A B B A), on one set of processes (services, broker, redis-server,
// supervisor): compare/handwritten/<rate>/<round> and
// compare/sluice/<rate>/<round> at 500 and 1,000
// requests/s, at max (the load generator at SLUICE_DEPLOYED_MAX
// requests/s, default 3,000, about what either worker completes on 2
// cores beside it) and backlog: the load of max produced while no
// scheduler runs, then the worker started, its completed/s counted from
// its start to its last completed request. backlog is the saturation
// row: at max a worker that keeps up completes what is offered, and the
// two rows then differ only by how their last requests drain. Each run
// starts a fresh incarnation of its worker, in the scheduler's group with
// its instance id, so that its CPU time and peak memory are that run's;
// the load lasts SLUICE_DEPLOYED_LOAD (default 20s) and the run ends
// once every request has its outcome and verifies (3 minutes at most).
//
// Each reports completed/s (from the worker's start to the last completed
// request's deliveries record: drain included, the verification's own
// time not), completed_share, p50_ms and p99_ms (the worker's end-to-end histogram, record timestamp to outcome;
// the hand-written worker waits out a 429's Retry-After in place, the
// sluice one parks the request and replays it 1-1.2 s later),
// p99_unthrottled_ms and p99_throttled_ms (the verification's measure,
// the same for both workers: produce to the deliveries record, over the
// requests never answered 429 and over those answered 429 at least once),
// drain_s (from the end of the load to the last completed request),
// worker_cpu_us/req (user+system CPU of the worker per request sent),
// worker_peak_rss_mb (VmHWM), and lost, twice (side effects created more
// than once during this run) and left from the verification of this run's
// requests; then compare/sluice_vs_handwritten/<rate> reports each
// worker's means over its runs and their ratios (cpu_ratio,
// completed_ratio). SLUICE_COMPARE_FLAGS adds flags to `sluice run delivery`
// (e.g. "-latency-target 1s"). SLUICE_DEPLOYED_PROFILE names a directory
// where each worker's CPU profile of each run is written
// (<worker>-<rate>-<round>.pprof): the hand-written worker's of its whole run,
// sluice's over the load (over its first half for backlog), fetched from
// its /debug/pprof/profile (-pprof), and beside it what sluice allocated
// over the same time (sluice-<rate>-<round>.allocs.pprof, from
// /debug/pprof/allocs).
func runCompare(b *testing.B, bin string) {
	hw := buildHandwritten(b)
	load := 20 * time.Second
	if v := os.Getenv("SLUICE_DEPLOYED_LOAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("SLUICE_DEPLOYED_LOAD: %q is not a duration", v)
		}
		load = d
	}
	top := 3000.0
	if v := os.Getenv("SLUICE_DEPLOYED_MAX"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("SLUICE_DEPLOYED_MAX: %q is not a rate", v)
		}
		top = r
	}
	s := deployment.Start(b, bin, deployedConfig)
	rates := []struct {
		name    string
		rate    float64
		backlog bool
	}{{"500", 500, false}, {"1000", 1000, false}, {"max", top, false}, {"backlog", top, true}}
	// Every load numbers its requests apart: the services keep one
	// record per delivery id for as long as they run.
	loads := 0
	// The two workers run rate by rate, one after the other, and take
	// turns at going first: a run leaves the shared processes (services,
	// broker, redis-server) more state, and the run after it does worse
	// (the hand-written worker's CPU per request at max rose from 288 to
	// 325–332 µs on its second and third run in a row). Run in two
	// blocks, every row of the second worker paid for the first's.
	sluiceFirst := os.Getenv("SLUICE_COMPARE_SLUICE_FIRST") != ""
	// Rounds: each rate runs the pair again in the other order (ABBA), so
	// that a drift over the run (what a run leaves the shared processes)
	// weighs on both workers alike, and each worker's figure is the mean
	// of its runs.
	rounds := 2
	if v := os.Getenv("SLUICE_COMPARE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_COMPARE_ROUNDS: %q is not a positive count", v)
		}
		rounds = n
	}
	got := map[string]map[string][]comparedRun{}
	for i, r := range rates {
		got[r.name] = map[string][]comparedRun{}
		for round := 1; round <= rounds; round++ {
			impls := []string{"handwritten", "sluice"}
			if (i%2 == 1) != sluiceFirst != (round%2 == 0) {
				impls[0], impls[1] = impls[1], impls[0]
			}
			for _, impl := range impls {
				// compare/<impl>/<rate>/<round>: a name with a slash is
				// matched level by level, as if the runs were nested.
				b.Run(fmt.Sprintf("%s/%s/%d", impl, r.name, round), func(b *testing.B) {
					for b.Loop() {
						loads++
						run := compareRun(b, s, impl, hw, r.rate, r.backlog, load, loads*idsPerLoad, fmt.Sprintf("%s-%d", r.name, round))
						got[r.name][impl] = append(got[r.name][impl], run)
					}
				})
			}
		}
	}
	logComparison(b, got)
}

// comparedRun is what one worker did in one run of the comparison.
type comparedRun struct {
	completedPerS, cpuPerReq float64
}

// logComparison reports, rate by rate, each worker's mean over its runs
// and sluice's ratio to the hand-written worker, as the benchmark
// compare/sluice_vs_handwritten/<rate>.
func logComparison(b *testing.B, got map[string]map[string][]comparedRun) {
	mean := func(rs []comparedRun) (c, u float64) {
		for _, r := range rs {
			c += r.completedPerS / float64(len(rs))
			u += r.cpuPerReq / float64(len(rs))
		}
		return c, u
	}
	for _, rate := range []string{"500", "1000", "max", "backlog"} {
		hw, sl := got[rate]["handwritten"], got[rate]["sluice"]
		if len(hw) == 0 || len(sl) == 0 {
			continue
		}
		hc, hu := mean(hw)
		sc, su := mean(sl)
		b.Run("sluice_vs_handwritten/"+rate, func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(su, "sluice_cpu_us/req")
			b.ReportMetric(hu, "handwritten_cpu_us/req")
			b.ReportMetric(su/hu, "cpu_ratio")
			b.ReportMetric(sc, "sluice_completed/s")
			b.ReportMetric(hc, "handwritten_completed/s")
			b.ReportMetric(sc/hc, "completed_ratio")
			b.ReportMetric(float64(min(len(sl), len(hw))), "runs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// buildHandwritten builds the hand-written scheduler into a temporary
// directory.
func buildHandwritten(b *testing.B) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "handwritten-scheduler")
	cmd := exec.Command("go", "build", "-o", out, "github.com/sluice-streams/sluice/benchmarks/handwritten/scheduler")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the hand-written scheduler: %v\n%s", err, msg)
	}
	return out
}

// profileWorker fetches a profile of w over d from its
// /debug/pprof/<kind> into file (kind profile: CPU; allocs: what was
// allocated over d); the channel says how it ended.
func profileWorker(b *testing.B, w *deployed.Worker, kind string, d time.Duration, file string) <-chan error {
	b.Helper()
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", w.Listen, kind, int(math.Ceil(d.Seconds())))
		resp, err := (&http.Client{Timeout: d + time.Minute}).Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("%s: %s", url, resp.Status)
			return
		}
		f, err := os.Create(file)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return done
}

// idsPerLoad is how many delivery ids each load of the comparison may
// use: more than its rate times its duration.
const idsPerLoad = 100_000_000

// compareRun replaces the scheduler with a fresh incarnation of impl,
// loads it at rate for load with ids from firstID, waits for the outcomes
// and reports. With backlog, the load is produced first, while no
// scheduler runs, and the run counts from the worker's start: what it
// completes a second with a backlog and nothing else loading the machine.
func compareRun(b *testing.B, s *deployment.System, impl, hw string, rate float64, backlog bool, load time.Duration, firstID int,
	label string) comparedRun {
	s.Worker("delivery").Stop(syscall.SIGTERM)
	ctx := context.Background()
	before, err := s.LedgerTotals(ctx)
	if err != nil {
		b.Fatal(err)
	}
	produce := func() *loadgen.Sent {
		sent, err := s.Load(ctx, "-rate", fmt.Sprint(rate), "-burst", "0", "-duration", load.String(), "-first-id", fmt.Sprint(firstID))
		if err != nil {
			b.Fatal(err)
		}
		return sent
	}
	var sent *loadgen.Sent
	if backlog {
		sent = produce()
	}
	profiled := load
	if backlog {
		// The backlog may drain in less than the time it took to produce:
		// a profile longer than the worker's life would end with it.
		profiled = load / 2
	}
	w := startCompared(b, s, impl, hw, label, profiled)
	start := time.Now()
	if !backlog {
		sent = produce()
	}
	loadEnd := time.Now()
	sum, _, err := s.Settle(ctx, sent, 3*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	// The run ends with its last completed request (its deliveries
	// record), not with the verification that saw it: a verification of
	// 60,000 requests takes a second or more, which would count in a run
	// of 20 as noise of either worker.
	end := time.Now()
	if last := sum.LastCompleted; last.After(start) && last.Before(end) {
		end = last
	}
	elapsed, drain := end.Sub(start), max(0, end.Sub(loadEnd))
	if !w.Alive() {
		b.Fatalf("the %s scheduler exited during the run", impl)
	}
	h, err := w.Scrape("sluice_end_to_end_latency_seconds")
	if err != nil {
		b.Fatal(err)
	}
	rss := w.PeakRSS()
	var calls, timeouts, parked float64
	if impl == "sluice" {
		calls, timeouts, parked = sluiceWasted(b, w)
	}
	cpu := w.Stop(syscall.SIGTERM)
	b.Logf("%s", sum)
	deliverable := float64(max(1, sum.Deliverable))
	run := comparedRun{completedPerS: float64(sum.Completed) / elapsed.Seconds(),
		cpuPerReq: float64(cpu.Microseconds()) / math.Max(1, float64(sent.Total()))}
	b.ReportMetric(run.completedPerS, "completed/s")
	b.ReportMetric(float64(sum.Completed)/deliverable, "completed_share")
	b.ReportMetric(1000*h.Quantile(0.5), "p50_ms")
	b.ReportMetric(1000*h.Quantile(0.99), "p99_ms")
	reportByThrottling(b, sum)
	b.ReportMetric(drain.Seconds(), "drain_s")
	b.ReportMetric(run.cpuPerReq, "worker_cpu_us/req")
	b.ReportMetric(float64(rss)/(1<<20), "worker_peak_rss_mb")
	b.ReportMetric(float64(sum.Lost), "lost")
	b.ReportMetric(float64(sum.Twice-before.Twice()), "twice")
	b.ReportMetric(float64(sum.LeftoverAfterUndo), "left")
	if impl == "sluice" {
		n := math.Max(1, float64(sent.Total()))
		b.ReportMetric(calls/n, "step_calls/req")
		b.ReportMetric(timeouts/n, "step_timeouts/req")
		b.ReportMetric(parked/n, "parked/req")
	}
	return run
}

// sluiceWasted reads from the sluice scheduler's metrics the calls its
// five steps made, those cut by their attempt's timeout, and the requests
// it parked: where work is done again.
func sluiceWasted(b *testing.B, w *deployed.Worker) (calls, timeouts, parked float64) {
	b.Helper()
	for _, st := range []string{"check_account", "create_package", "check_third_party", "schedule_drone", "create_delivery"} {
		c, err := w.Counter("sluice_async_calls_total", map[string]string{"stage": st})
		if err != nil {
			b.Fatal(err)
		}
		t, err := w.Counter("sluice_async_calls_total", map[string]string{"stage": st, "result": "timeout"})
		if err != nil {
			b.Fatal(err)
		}
		calls, timeouts = calls+c, timeouts+t
	}
	parked, err := w.Counter("sluice_stage_settled_total", map[string]string{"outcome": "parked"})
	if err != nil {
		b.Fatal(err)
	}
	return calls, timeouts, parked
}

// startCompared starts a fresh incarnation of impl as the scheduler,
// profiled into SLUICE_DEPLOYED_PROFILE if set (<impl>-<label>.pprof; the
// hand-written worker's over its whole life, sluice's over the given
// duration from now).
func startCompared(b *testing.B, s *deployment.System, impl, hw, label string, profiled time.Duration) *deployed.Worker {
	dir := os.Getenv("SLUICE_DEPLOYED_PROFILE")
	if impl == "handwritten" {
		args := []string{"-brokers", s.Brokers, "-backends", s.Services, "-redis", s.Redis.Addr,
			"-group", deployed.Group, "-instance-id", "delivery-0"}
		if dir != "" {
			args = append(args, "-cpuprofile", filepath.Join(dir, "handwritten-"+label+".pprof"))
		}
		return s.StartProgram("delivery", hw, args...)
	}
	flags := strings.Fields(os.Getenv("SLUICE_COMPARE_FLAGS"))
	if dir == "" {
		return s.StartWorker("delivery", flags...)
	}
	w := s.StartWorker("delivery", append(flags, "-pprof")...)
	prof := profileWorker(b, w, "profile", profiled, filepath.Join(dir, "sluice-"+label+".pprof"))
	allocs := profileWorker(b, w, "allocs", profiled, filepath.Join(dir, "sluice-"+label+".allocs.pprof"))
	b.Cleanup(func() {
		if err := errors.Join(<-prof, <-allocs); err != nil {
			b.Errorf("profiling the sluice scheduler: %v", err)
		}
	})
	return w
}

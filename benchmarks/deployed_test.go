package benchmarks

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/deployment"
)

// BenchmarkDeliveryDeployed runs the drone delivery system as it is
// deployed, every part a process of its own on this machine: `sluice
// broker` (16 partitions), `sluice services` (calls of 1-5 ms, 5%
// transient failures, 1% throttled with a 20 ms Retry-After, which the
// HTTP handler rounds up to 1 s; drones booked on every call), a real
// redis-server for the drone step's records (mode b), `sluice run
// delivery` and `sluice run supervisor` (default flags), and `sluice
// loadgen` producing at a fixed rate without bursts. Scenarios:
//
//	sustained_<rate>  the rate for 20 s
//	burst_2x          twice the highest sustained rate for 10 s
//	sigkill           the highest sustained rate for 20 s, the scheduler
//	                  killed with SIGKILL 3 times and started again
//	redis_outage      the highest sustained rate for 25 s, redis-server
//	                  killed 5 s in and started again 10 s later
//	server_errors     the highest sustained rate for 50 s, the drone
//	                  service answering 500 to every call (undos
//	                  included) from 10 s in for 30 s
//	slow_services     the highest sustained rate for 50 s, every call of
//	                  every service taking 300 ms more from 10 s in for
//	                  30 s
//	services_down     the highest sustained rate for 80 s, the services'
//	                  address refusing connections (open ones closed: the
//	                  scheduler's and the supervisor's calls alike) from
//	                  10 s in for 60 s
//
// The faults are started through the admin address of `sluice services`
// (POST /admin/faults); `sluice services -fault` reproduces them by hand.
//
// Each reports completed/s (deliverable requests completed per second of
// the run, drain included), completed_share, compensated_share and
// dead_lettered_share (of the deliverable requests), p50_ms, p90_ms and
// p99_ms (the scheduler's end-to-end latency histogram, record timestamp
// to settle, summed over its incarnations and interpolated within its x2
// buckets; a parked request settles twice, parked and then replayed, its
// replay counted from its parking: about 5% of the requests — those
// throttled once in their five calls, with a 1 s Retry-After that
// outlasts the 400 ms budget — wait the 2 s replay delay, and set p99),
// p99_unthrottled_ms and p99_throttled_ms (measured by the verification,
// whatever the worker: from the load generator's produce to the
// deliveries service's record, over the completed requests no service
// answered 429 and over those one did; a throttled request waits at least
// its Retry-After, so the first is the scheduler's own p99), max_lag (the
// scheduler group's lag, sampled every 100 ms), drain_s (from the end of
// the load until every request had its outcome), max_stall_s (the longest
// time with lag and no new outcome), lost, twice, left (side effects left
// after a compensation), worker_exits (scheduler incarnations that ended
// on their own), worker_cpu_us/req (user+system CPU of the scheduler's
// processes per request sent) and worker_peak_rss_mb (the largest peak
// resident memory, VmHWM, of its incarnations). services_down also reports
// last_undo_after_up_s: seconds from the services' return to the last undo
// (a delete) they applied, 0 if none came after (how long compensations
// went on after the outage, those of requests drained from the lag after
// it included: a suspended owner's request read from the lag is only
// found out, and compensated, then), and undo_wait_after_up_s: the
// longest any compensation waited for its undo after the services were
// back, from its event's writing (or from the return, for one written
// before it): the undo's own milliseconds when every one ran as soon as
// both the services and its event were there, 0 if none came after.
//
// compare runs the scheduler written by hand without sluice
// (benchmarks/handwritten/scheduler) and then `sluice run delivery` on
// the same services, broker and redis-server, each at 500 and 1,000
// requests/s and at saturation: compare/handwritten/<rate> and
// compare/sluice/<rate> (see runCompare).
//
// One scenario alone: -bench 'BenchmarkDeliveryDeployed/server_errors$'.
//
// SLUICE_DEPLOYED_RATES (comma-separated, default 250,500,1000) sets the
// sustained rates; SLUICE_DEPLOYED_TOP (default: the last of them) the
// rate of burst_2x, sigkill, redis_outage and the three faults;
// SLUICE_DEPLOYED_BIN a sluice binary to run instead of this tree's (built
// from another commit, to compare). `make bench-delivery-deployed` runs it
// (about 22 minutes with compare; SCENARIO=services_down runs one).
func BenchmarkDeliveryDeployed(b *testing.B) {
	bin := os.Getenv("SLUICE_DEPLOYED_BIN") // a sluice binary built elsewhere (another commit), to compare
	if bin == "" {
		bin = deployed.Build(b)
	}
	rates := []float64{250, 500, 1000}
	if v := os.Getenv("SLUICE_DEPLOYED_RATES"); v != "" {
		rates = rates[:0]
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || r <= 0 {
				b.Fatalf("SLUICE_DEPLOYED_RATES: %q is not a rate", f)
			}
			rates = append(rates, r)
		}
	}
	top := rates[len(rates)-1]
	if v := os.Getenv("SLUICE_DEPLOYED_TOP"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("SLUICE_DEPLOYED_TOP: %q is not a rate", v)
		}
		top = r
	}
	for _, rate := range rates {
		b.Run(fmt.Sprintf("sustained_%d", int(rate)), func(b *testing.B) {
			runDeployed(b, bin, deployedScenario{rate: rate, load: 20 * time.Second})
		})
	}
	b.Run("burst_2x", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: 2 * top, load: 10 * time.Second})
	})
	b.Run("sigkill", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: top, load: 20 * time.Second, during: func(s *deployment.System, r *deployedResult) {
			for range 3 {
				time.Sleep(5 * time.Second)
				r.kill(s)
			}
		}})
	})
	b.Run("redis_outage", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: top, load: 25 * time.Second, during: func(s *deployment.System, r *deployedResult) {
			time.Sleep(5 * time.Second)
			s.Redis.Stop()
			time.Sleep(10 * time.Second)
			s.Redis.Start()
		}})
	})
	b.Run("server_errors", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: top, load: 50 * time.Second,
			during: faultAt(10*time.Second, delivery.Fault{Service: "drones", Status: 500, For: 30 * time.Second})})
	})
	b.Run("slow_services", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: top, load: 50 * time.Second,
			during: faultAt(10*time.Second, delivery.Fault{Service: "all", Latency: 300 * time.Millisecond, For: 30 * time.Second})})
	})
	b.Run("services_down", func(b *testing.B) {
		runDeployed(b, bin, deployedScenario{rate: top, load: 80 * time.Second, lastUndo: true,
			during: faultAt(10*time.Second, delivery.Fault{Service: "all", Down: true, For: time.Minute})})
	})
	b.Run("compare", func(b *testing.B) { runCompare(b, bin) })
}

// deployedConfig are the services every scenario runs against.
var deployedConfig = deployed.Config{Services: []string{"-min-latency", "1ms", "-max-latency", "5ms",
	"-transient", "0.05", "-throttle", "0.01", "-retry-after", "20ms", "-permanent", "0"}}

// faultAt makes the services show f from at into the load; f ends by
// itself (f.For) within the load.
func faultAt(at time.Duration, f delivery.Fault) func(*deployment.System, *deployedResult) {
	return func(s *deployment.System, r *deployedResult) {
		time.Sleep(at)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sf, err := s.Fault(ctx, f)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fault, r.faultErr = sf, err
	}
}

// deployedScenario is one run: load at rate for load, and during it
// (if set) what happens to the system. lastUndo reports
// last_undo_after_up_s, from the end of the fault that during started.
type deployedScenario struct {
	rate     float64
	load     time.Duration
	during   func(*deployment.System, *deployedResult)
	lastUndo bool
}

// deployedResult gathers what the incarnations of the scheduler leave,
// and the fault the scenario started.
type deployedResult struct {
	mu       sync.Mutex
	cpu      time.Duration
	peakRSS  int64 // the largest of the incarnations' peaks, bytes
	latency  deployed.Histogram
	exits    int
	fault    delivery.ScheduledFault
	faultErr error
}

// retire scrapes the scheduler's incarnation, ends it with sig and keeps
// its CPU time, latency histogram and peak memory.
func (r *deployedResult) retire(w *deployed.Worker, sig syscall.Signal) {
	h, err := w.Scrape("sluice_end_to_end_latency_seconds")
	rss := w.PeakRSS()
	cpu := w.Stop(sig)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.latency.Add(h)
	}
	r.cpu += cpu
	r.peakRSS = max(r.peakRSS, rss)
}

// kill kills the scheduler (SIGKILL) and starts another incarnation.
func (r *deployedResult) kill(s *deployment.System) {
	w := s.Worker("delivery")
	if !w.Alive() {
		r.mu.Lock()
		r.exits++
		r.mu.Unlock()
	}
	r.retire(w, syscall.SIGKILL)
	s.StartWorker("delivery")
}

func runDeployed(b *testing.B, bin string, sc deployedScenario) {
	for b.Loop() {
		s := deployment.Start(b, bin, deployedConfig)
		r := &deployedResult{latency: deployed.Histogram{}}
		ctx, cancel := context.WithCancel(context.Background())
		// Sample the lag and the outcomes until the run settles.
		var maxLag int64
		var maxStall time.Duration
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			last, lastAt := -1, time.Now()
			for ctx.Err() == nil {
				lag, err := s.Lag(ctx)
				if err == nil && lag > maxLag {
					maxLag = lag
				}
				if p, err := s.Progress(ctx); err == nil {
					switch {
					case p != last || lag == 0:
						last, lastAt = p, time.Now()
					case time.Since(lastAt) > maxStall:
						maxStall = time.Since(lastAt)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		rc := redis.NewClient(&redis.Options{Addr: s.Redis.Addr})
		defer rc.Close()
		_, redisCmds0 := redisCalls(b, rc)
		redisCPU0 := redisCPU(b, rc)
		start := time.Now()
		if sc.during != nil {
			go sc.during(s, r)
		}
		sent, err := s.Load(ctx, "-rate", fmt.Sprint(sc.rate), "-burst", "0", "-duration", sc.load.String())
		if err != nil {
			b.Fatal(err)
		}
		loadEnd := time.Now()
		if sc.during != nil {
			// what happens during the load ends with it (the scenarios are
			// timed to), give it a moment to finish its last step
			time.Sleep(time.Second)
		}
		sum, _, err := s.Settle(ctx, sent, 3*time.Minute)
		drain := time.Since(loadEnd)
		if err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		cancel()
		<-sampled
		// Redis's counters start again if it restarted (redis_outage):
		// then there is no figure.
		if _, cmds := redisCalls(b, rc); cmds >= redisCmds0 {
			b.ReportMetric(float64(cmds-redisCmds0)/math.Max(1, float64(sent.Total())), "redis_cmds/req")
			b.ReportMetric(float64((redisCPU(b, rc)-redisCPU0).Microseconds())/math.Max(1, float64(sent.Total())), "redis_cpu_us/req")
		}
		r.mu.Lock()
		fault, faultErr := r.fault, r.faultErr
		r.mu.Unlock()
		if faultErr != nil {
			b.Fatalf("starting the fault: %v", faultErr)
		}
		var lastUndoAfterUp, undoWait float64
		if sc.lastUndo {
			lastUndoAfterUp = lastUndoAfter(b, s, fault)
			uctx, ucancel := context.WithTimeout(context.Background(), 30*time.Second)
			waited, before, err := s.UndoWait(uctx, *fault.Ends)
			ucancel()
			if err != nil {
				b.Fatal(err)
			}
			undoWait = waited.Seconds()
			b.Logf("%d compensation events written before the services were back; the longest wait for an undo after it: %v",
				before, waited.Round(time.Millisecond))
		}
		w := s.Worker("delivery")
		if !w.Alive() {
			r.exits++
		}
		r.retire(w, syscall.SIGTERM)
		b.Logf("%s", sum)
		deliverable := float64(max(1, sum.Deliverable))
		b.ReportMetric(float64(sum.Completed)/elapsed.Seconds(), "completed/s")
		b.ReportMetric(float64(sum.Completed)/deliverable, "completed_share")
		b.ReportMetric(float64(sum.CompensatedBy["deliverable"])/deliverable, "compensated_share")
		b.ReportMetric(float64(sum.ValidDeadLettered)/deliverable, "dead_lettered_share")
		b.ReportMetric(1000*r.latency.Quantile(0.5), "p50_ms")
		b.ReportMetric(1000*r.latency.Quantile(0.9), "p90_ms")
		b.ReportMetric(1000*r.latency.Quantile(0.99), "p99_ms")
		reportByThrottling(b, sum)
		b.ReportMetric(float64(maxLag), "max_lag")
		b.ReportMetric(drain.Seconds(), "drain_s")
		b.ReportMetric(maxStall.Seconds(), "max_stall_s")
		b.ReportMetric(float64(sum.Lost), "lost")
		b.ReportMetric(float64(sum.Twice), "twice")
		b.ReportMetric(float64(sum.LeftoverAfterUndo), "left")
		b.ReportMetric(float64(r.exits), "worker_exits")
		b.ReportMetric(float64(r.cpu.Microseconds())/math.Max(1, float64(sent.Total())), "worker_cpu_us/req")
		b.ReportMetric(float64(r.peakRSS)/(1<<20), "worker_peak_rss_mb")
		if sc.lastUndo {
			b.ReportMetric(lastUndoAfterUp, "last_undo_after_up_s")
			b.ReportMetric(undoWait, "undo_wait_after_up_s")
		}
	}
}

// reportByThrottling reports the p99 end-to-end latency of the completed
// requests that no service throttled and of those one did, as the
// verification measured them (demo.Summary.NeverThrottled): the same for
// every worker, with sluice's histograms or without.
func reportByThrottling(b *testing.B, sum demo.Summary) {
	b.ReportMetric(1000*sum.NeverThrottled.P99.Seconds(), "p99_unthrottled_ms")
	b.ReportMetric(1000*sum.Throttled.P99.Seconds(), "p99_throttled_ms")
}

// lastUndoAfter is the time from the end of fault to the last undo the
// services applied, in seconds (0 if none came after).
func lastUndoAfter(b *testing.B, s *deployment.System, fault delivery.ScheduledFault) float64 {
	if fault.Ends == nil {
		b.Fatalf("the fault %s has no end", fault.Spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := s.LedgerTotals(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if t.LastUndo == nil || !t.LastUndo.After(*fault.Ends) {
		return 0
	}
	return t.LastUndo.Sub(*fault.Ends).Seconds()
}

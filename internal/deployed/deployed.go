// Package deployed runs the drone delivery system as it is deployed: the
// sluice binary in a process per part — `sluice broker`, `sluice
// services`, `sluice run delivery`, `sluice run supervisor`, `sluice
// loadgen` — and a real redis-server for the drone step's records (mode
// b). Its System can kill and restart a worker, stop Redis for an outage,
// make the services fail (an error status, extra latency, or their address
// refusing connections: delivery.Fault), sample the scheduler's consumer
// lag and its progress, and verify the run from the load generator's
// record, the services' ledger and the dead letters, as `sluice verify`
// does. The ledger is read, and the faults driven, on the services' admin
// address, which stays up while the services are down. The end-to-end test of the workers
// and BenchmarkDeliveryDeployed use it.
package deployed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/source/kafka"
)

// Config shapes a system.
type Config struct {
	// Partitions of each topic (default 16).
	Partitions int
	// Services are the flags of `sluice services` (faults, latency).
	Services []string
	// Worker are flags added to both workers' `sluice run`; Delivery to
	// the scheduler's only (-stale-after, -parallelism: the supervisor
	// takes neither).
	Worker, Delivery []string
}

// The scheduler's consumer group, its input topic and its failures
// topic (the worker's defaults).
const (
	Group         = "sluice-delivery"
	RequestsTopic = "delivery-requests"
	FailuresTopic = "delivery-failures"
)

// System is a running system. Its methods may be called from one
// goroutine at a time, except Lag, Progress and the sampler's.
type System struct {
	tb       testing.TB
	bin, dir string
	cfg      Config
	Brokers  string
	Services string // base URL of the services, which the workers call
	Admin    string // base URL of their ledger and fault switches (with a binary from before them: Services)
	Redis    *testenv.RedisServer
	adm      *kadm.Client
	kcl      *kgo.Client

	mu      sync.Mutex
	workers map[string]*Worker
	n       map[string]int
	procs   []*proc // broker, services
}

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

// Worker is one incarnation of a worker process.
type Worker struct {
	Which  string
	Listen string // its metrics address
	p      *proc
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

// Start starts the broker, redis-server, the services and both workers,
// each ready, and stops them all when tb ends (and, if tb failed, logs
// the tail of every process's output).
func Start(tb testing.TB, bin string, cfg Config) *System {
	tb.Helper()
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	s := &System{tb: tb, bin: bin, dir: tb.TempDir(), cfg: cfg, workers: map[string]*Worker{}, n: map[string]int{}}
	tb.Cleanup(s.stop)
	ps := ports(tb, 3)
	s.Brokers = fmt.Sprintf("127.0.0.1:%d", ps[0])
	s.procs = append(s.procs, s.spawn("broker", "broker", "-port", fmt.Sprint(ps[0]), "-partitions", fmt.Sprint(cfg.Partitions)))
	s.Services = fmt.Sprintf("http://127.0.0.1:%d", ps[1])
	services := []string{"services", "-listen", s.Services[len("http://"):]}
	if hasAdminAddress(bin) {
		s.Admin = fmt.Sprintf("http://127.0.0.1:%d", ps[2])
		services = append(services, "-admin-listen", s.Admin[len("http://"):])
	} else {
		s.Admin = s.Services // a binary from before the admin address: no faults
	}
	s.procs = append(s.procs, s.spawn("services", append(services, cfg.Services...)...))
	s.Redis = testenv.StartDurableRedis(tb)
	var err error
	if s.kcl, err = kgo.NewClient(kgo.SeedBrokers(s.Brokers)); err != nil {
		tb.Fatal(err)
	}
	s.adm = kadm.NewClient(s.kcl)
	s.await("the broker and its topics", 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ts, err := s.adm.ListTopics(ctx)
		if err != nil {
			return err
		}
		if !ts.Has(RequestsTopic) {
			return errors.New("no " + RequestsTopic + " yet")
		}
		return nil
	})
	s.await("the services", 30*time.Second, func() error {
		for _, base := range []string{s.Services, s.Admin} {
			if _, err := delivery.FetchLedgerTotals(context.Background(), http.DefaultClient, base); err != nil {
				return err
			}
		}
		return nil
	})
	s.StartWorker("delivery")
	s.StartWorker("supervisor")
	return s
}

// hasAdminAddress reports whether the binary's services take
// -admin-listen: a binary built from an earlier commit, to compare with,
// serves its ledger on the services' address only and shows no faults.
func hasAdminAddress(bin string) bool {
	out, _ := exec.Command(bin, "services", "-h").CombinedOutput()
	return strings.Contains(string(out), "-admin-listen")
}

// spawn starts the binary with args, its output in a log file named name.
func (s *System) spawn(name string, args ...string) *proc {
	s.tb.Helper()
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		s.tb.Fatal(err)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	return p
}

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

// StartWorker starts an incarnation of the delivery or supervisor worker
// (with the same instance id as the last: static membership) and waits
// until it is ready.
func (s *System) StartWorker(which string) *Worker {
	s.tb.Helper()
	s.mu.Lock()
	s.n[which]++
	n := s.n[which]
	s.mu.Unlock()
	listen := fmt.Sprintf("127.0.0.1:%d", ports(s.tb, 1)[0])
	args := []string{"run", which, "-brokers", s.Brokers, "-backends", s.Services, "-listen", listen,
		"-instance-id", which + "-0"}
	if which == "delivery" {
		args = append(args, "-redis", s.Redis.Addr)
		args = append(args, s.cfg.Delivery...)
	}
	args = append(args, s.cfg.Worker...)
	w := &Worker{Which: which, Listen: listen, p: s.spawn(fmt.Sprintf("%s-%d", which, n), args...)}
	s.mu.Lock()
	s.workers[which] = w
	s.mu.Unlock()
	s.await(which+" worker", 60*time.Second, func() error {
		select {
		case <-w.p.done:
			s.tb.Fatalf("the %s worker exited at start: %v (log %s)", which, w.p.cmd.ProcessState, s.logTail(fmt.Sprintf("%s-%d", which, n)))
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

// Stop ends the incarnation with sig (SIGKILL: a crash; SIGTERM: a
// drain) and returns the CPU time it used (user and system).
func (w *Worker) Stop(sig syscall.Signal) time.Duration {
	w.p.stop(sig, 30*time.Second)
	st := w.p.cmd.ProcessState
	return st.UserTime() + st.SystemTime()
}

// Load runs `sluice loadgen` with args (besides -brokers and -record) to
// its end and returns what it sent.
func (s *System) Load(ctx context.Context, args ...string) (*loadgen.Sent, error) {
	s.mu.Lock()
	s.n["loadgen"]++
	name := fmt.Sprintf("loadgen-%d", s.n["loadgen"])
	s.mu.Unlock()
	record := filepath.Join(s.dir, name+".jsonl")
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"loadgen", "-brokers", s.Brokers, "-record", record}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loadgen: %w (%s)", err, s.logTail(name))
	}
	f, err := os.Open(record)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return loadgen.ReadRecord(f)
}

// Lag is the scheduler group's lag on the requests topic: records
// produced and not yet committed.
func (s *System) Lag(ctx context.Context) (int64, error) {
	return s.lag(ctx, RequestsTopic, Group)
}

// LagAll is the lag of every group of both workers (the scheduler's, the
// supervisor's and their replay groups) on every topic they read: zero
// once every record produced so far, parked ones and compensations
// included, has been processed and committed.
func (s *System) LagAll(ctx context.Context) (int64, error) {
	return s.lag(ctx, "", Group, Group+"-replay", "sluice-supervisor", "sluice-supervisor-replay")
}

// lag sums the lag of groups on topic ("": every topic).
func (s *System) lag(ctx context.Context, topic string, groups ...string) (int64, error) {
	lags, err := s.adm.Lag(ctx, groups...)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, g := range groups {
		l, ok := lags[g]
		if !ok {
			return 0, errors.New("no lag for " + g)
		}
		if l.Error() != nil {
			return 0, fmt.Errorf("lag of %s: %w", g, l.Error())
		}
		for _, ps := range l.Lag {
			for _, p := range ps {
				if (topic == "" || p.Topic == topic) && p.Lag > 0 {
					sum += p.Lag
				}
			}
		}
	}
	return sum, nil
}

// Progress is the services' count of outcomes so far: deliveries live and
// packages undone.
func (s *System) Progress(ctx context.Context) (int, error) {
	t, err := s.LedgerTotals(ctx)
	if err != nil {
		return 0, err
	}
	return t.LiveCount("deliveries") + t.UndoneCount("packages"), nil
}

// Settle waits up to limit for every request of sent to have its outcome
// and the run to verify, and returns the verification then (or when the
// limit is reached) and how long it waited.
func (s *System) Settle(ctx context.Context, sent *loadgen.Sent, limit time.Duration) (demo.Summary, time.Duration, error) {
	start := time.Now()
	cl := &http.Client{}
	for {
		final := time.Since(start) >= limit
		sum, accounted, err := demo.VerifyRemote(ctx, cl, s.Admin, sent, []string{s.Brokers}, final)
		if final || err == nil && accounted && sum.OK() {
			if err != nil {
				return demo.Summary{}, time.Since(start), err
			}
			if !accounted {
				return *sum, time.Since(start), fmt.Errorf("after %v not every request has an outcome: %s", limit, sum)
			}
			return *sum, time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return demo.Summary{}, time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// LedgerTotals reads the services' ledger totals (from their admin
// address: also while they are down).
func (s *System) LedgerTotals(ctx context.Context) (delivery.LedgerTotals, error) {
	return delivery.FetchLedgerTotals(ctx, http.DefaultClient, s.Admin)
}

// UndoWait returns the longest any compensation waited after t (an
// outage's end) for its undo: from its event's writing, or from t if the
// scheduler wrote it before, to its undo (its package's, as verification
// counts a compensation); 0 if every one was done before t. It also says
// how many events were written before t.
func (s *System) UndoWait(ctx context.Context, t time.Time) (time.Duration, int, error) {
	written := map[string]time.Time{} // request id -> its (first) compensation event
	err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(s.Brokers)}, FailuresTopic, time.Time{}, func(r *kgo.Record) bool {
		id := string(r.Key)
		if c, err := delivery.DecodeEvent(r); err == nil && c.Progress.Request.ID != "" {
			id = c.Progress.Request.ID
		}
		if at, ok := written[id]; !ok || r.Timestamp.Before(at) {
			written[id] = r.Timestamp
		}
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	snap, err := delivery.FetchLedger(ctx, http.DefaultClient, s.Admin)
	if err != nil {
		return 0, 0, err
	}
	var longest time.Duration
	before := 0
	for id, at := range written {
		from := at
		if at.Before(t) {
			before++
			from = t
		}
		if done := snap.Record(id).Packages.UndoneAt; done != nil && done.Sub(from) > longest {
			longest = done.Sub(from)
		}
	}
	return longest, before, nil
}

// Fault makes the services show f, its After counted from now, and
// returns it as scheduled (with when it starts and ends).
func (s *System) Fault(ctx context.Context, f delivery.Fault) (delivery.ScheduledFault, error) {
	return delivery.StartFault(ctx, http.DefaultClient, s.Admin, f)
}

// ClearFaults ends every fault of the services now.
func (s *System) ClearFaults(ctx context.Context) error {
	_, err := delivery.ClearFaults(ctx, http.DefaultClient, s.Admin)
	return err
}

// Produce writes records to the broker (e.g. a request again, as a
// client's retry would).
func (s *System) Produce(ctx context.Context, recs ...*kgo.Record) error {
	return s.kcl.ProduceSync(ctx, recs...).FirstErr()
}

// Requests reads the requests topic from its start up to its end.
func (s *System) Requests(ctx context.Context) ([]*kgo.Record, error) {
	ends, err := s.adm.ListEndOffsets(ctx, RequestsTopic)
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers), kgo.ConsumeTopics(RequestsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
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

func (s *System) stop() {
	for _, which := range []string{"delivery", "supervisor"} {
		if w := s.Worker(which); w != nil && w.Alive() {
			w.Stop(syscall.SIGTERM)
		}
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop(syscall.SIGTERM, 10*time.Second)
	}
	if s.kcl != nil {
		s.kcl.Close()
	}
	if s.tb.Failed() {
		entries, _ := os.ReadDir(s.dir)
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
				s.tb.Logf("--- %s (last 2 KB)\n%s", name, s.logTail(name))
			}
		}
	}
}

func ports(tb testing.TB, n int) []int {
	tb.Helper()
	ps, err := testenv.FreePorts(n)
	if err != nil {
		tb.Fatal(err)
	}
	return ps
}

// Histogram is a Prometheus histogram read from a worker's /metrics:
// cumulative counts by upper bound, summed over every series of the name.
type Histogram map[float64]float64

// Scrape reads the histogram name from the incarnation's /metrics.
func (w *Worker) Scrape(name string) (Histogram, error) {
	resp, err := http.Get("http://" + w.Listen + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	h := Histogram{}
	if f, ok := fams[name]; ok {
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) { // the text format has it; the count is the same
					h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
			h[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return h, nil
}

// Add adds o's counts to h (two incarnations' histograms).
func (h Histogram) Add(o Histogram) {
	for k, v := range o {
		h[k] += v
	}
}

// Quantile estimates the q-quantile, interpolating linearly within the
// bucket that holds it (as PromQL's histogram_quantile does); NaN if h is
// empty.
func (h Histogram) Quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 || h[bounds[len(bounds)-1]] == 0 {
		return math.NaN()
	}
	total := h[bounds[len(bounds)-1]]
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		c := h[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return lo // beyond the last bound: the last bound is all we know
			}
			if c == below {
				return b
			}
			return lo + (b-lo)*(rank-below)/(c-below)
		}
		lo, below = b, c
	}
	return lo
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/logx"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// restoreLogging puts back the process's default logger after a test
// that built a worker's.
func restoreLogging(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev); redis.SetLogger(logx.NewPrintf(prev, "go-redis")); jsonLog.Store(nil) })
}

// A stage's retry warnings, hundreds over a healthy run, are folded: the
// first of each reason is logged, the rest counted; the summary's retries
// by reason are the metrics', which count every one.
func TestSummaryFoldsRetryWarningsAndMatchesTheMetrics(t *testing.T) {
	restoreLogging(t)
	var out testenv.Buffer
	lg, fold, err := (&logFlags{format: "text", level: "info"}).workerLogger(&out, 10*time.Second)
	if err != nil || fold == nil {
		t.Fatalf("workerLogger: %v, fold %v", err, fold)
	}
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	// Every request fails its first attempt: the even ones for no
	// particular reason (other), the odd ones throttled.
	const n = 400
	var mu sync.Mutex
	tried := map[int]bool{}
	call := func(_ context.Context, i int) (int, error) {
		mu.Lock()
		again := tried[i]
		tried[i] = true
		mu.Unlock()
		switch {
		case again:
			return i, nil
		case i%2 == 0:
			return 0, stream.Transient(errors.New("blip"))
		default:
			return 0, stream.Throttled(errors.New("slow down"), 0)
		}
	}
	ints := make([]int, n)
	for i := range ints {
		ints[i] = i
	}
	g := stream.New(stream.WithLogger(lg))
	called := stream.Via(stream.From(g, source.Slice(ints)), flow.MapAsync(16, call,
		flow.Retry(flow.RetryPolicy{Strategy: flow.Regular, Jitter: flow.NoJitter, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond})), stream.Name("call"))
	stream.To(called, sink.Discard[int]())
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	now, err := gatherSummary(reg)
	if err != nil {
		t.Fatal(err)
	}
	folded := fold.period()
	for _, rec := range summaryRecords(summaryCounts{}, now, 10*time.Second, folded) {
		lg.LogAttrs(ctx, slog.LevelInfo, rec[0].Value.String(), rec[1:]...)
	}
	log := out.String()
	if w := strings.Count(log, retryMessage); w != 2 {
		t.Errorf("%d retry warnings logged, want the first of each reason (2):\n%s", w, log)
	}
	if folded == 0 {
		t.Errorf("no warning folded:\n%s", log)
	}
	want := fmt.Sprintf("level=INFO msg=retries other=%d throttled=%d warnings_folded=%d", n/2, n/2, folded)
	if !strings.Contains(log, want) {
		t.Errorf("the retries line is not %q:\n%s", want, log)
	}
	if !strings.Contains(log, fmt.Sprintf("level=INFO msg=outcomes completed=%d\n", n)) ||
		!strings.Contains(log, fmt.Sprintf("level=INFO msg=summary in/s=0 out/s=%d replayed=0 lag=0 in_flight=0\n", n/10)) {
		t.Errorf("the summary and outcomes lines do not say %d completed over 10s:\n%s", n, log)
	}
	if r := metricSum(t, reg, "sluice_retries_total"); r != n {
		t.Errorf("sluice_retries_total %v, want %d: the summary's count and the metric's differ", r, n)
	}
}

// metricSum is the sum of every series of a metric of reg.
func metricSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

// A reason quiet for a whole period is logged again when it comes back;
// without summaries (-summary-every 0), nothing is folded.
func TestLoggingFoldsPerPeriod(t *testing.T) {
	restoreLogging(t)
	var out testenv.Buffer
	lg, fold, err := (&logFlags{format: "text", level: "info"}).workerLogger(&out, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	warn := func(l *slog.Logger, reason string) { l.Warn(retryMessage, "reason", reason, "attempt", 1) }
	stage := lg.With("stage", "schedule_drone")
	for range 50 {
		warn(stage, "timeout")
	}
	warn(lg, "throttled")
	if n := fold.period(); n != 49 {
		t.Errorf("period 1 folded %d, want 49", n)
	}
	warn(stage, "timeout") // seen in the last period: folded
	if n := fold.period(); n != 1 {
		t.Errorf("period 2 folded %d, want 1", n)
	}
	fold.period()          // a quiet period
	warn(stage, "timeout") // a new episode: logged
	if got := strings.Count(out.String(), "reason=timeout"); got != 2 {
		t.Errorf("%d timeout warnings logged, want 2:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "stage=schedule_drone") {
		t.Errorf("the logged warning lost its stage:\n%s", out.String())
	}
	var all testenv.Buffer
	lg, fold, _ = (&logFlags{format: "text", level: "info"}).workerLogger(&all, 0)
	for range 5 {
		warn(lg, "timeout")
	}
	if fold != nil || strings.Count(all.String(), retryMessage) != 5 {
		t.Errorf("without summaries: fold %v, log:\n%s", fold, all.String())
	}
}

// The summary lines of the widest realistic figures (a 10-second period
// at 50,000/s, a lag in the millions, every reason of retry) fit in 120
// columns of text log.
func TestSummaryLinesFitTheWidth(t *testing.T) {
	restoreLogging(t)
	var out testenv.Buffer
	lg, _, _ := (&logFlags{format: "text", level: "info"}).workerLogger(&out, time.Second)
	now := summaryCounts{in: 599_999, out: 599_999, replayed: 99_999, lag: 9_999_999, inFlight: 99_999,
		outcomes: map[string]float64{"completed": 499_999, "compensated": 9_999, "dead_lettered": 9_999, "parked": 9_999},
		retries:  map[string]float64{"throttled": 99_999, "timeout": 99_999, "connection": 99_999, "breaker_open": 9_999, "other": 9_999}}
	recs := summaryRecords(summaryCounts{}, now, 10*time.Second, 99_999)
	for _, rec := range recs {
		lg.LogAttrs(context.Background(), slog.LevelInfo, rec[0].Value.String(), rec[1:]...)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 || !strings.Contains(out.String(), "msg=retries breaker_open=9999") || !strings.Contains(out.String(), "warnings_folded=99999") {
		t.Fatalf("%d lines, want summary, outcomes and retries, every figure:\n%s", len(lines), out.String())
	}
	stamp := regexp.MustCompile(`^time=\S+ `)
	for _, l := range lines {
		// The time as a UTC machine writes it; another zone adds 5.
		if w := len(stamp.ReplaceAllString(l, "time=2026-11-28T06:00:47.123Z ")); w > 120 {
			t.Errorf("%d columns: %q", w, l)
		}
	}
}

// A stage that starts retrying is a new failure even when another stage
// retries for the same reason already: its first retry warning is logged,
// naming it (the summary's retries by reason do not say which stage).
func TestLoggingFoldsPerStage(t *testing.T) {
	restoreLogging(t)
	var out testenv.Buffer
	lg, _, err := (&logFlags{format: "text", level: "info"}).workerLogger(&out, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"create_package", "create_package", "schedule_drone"} {
		lg.With("stage", stage).Warn(retryMessage, "reason", "timeout", "attempt", 1, "err", "deadline exceeded")
	}
	log := out.String()
	if strings.Count(log, retryMessage) != 2 || !strings.Contains(log, "stage=schedule_drone") {
		t.Fatalf("want the first retry warning of each stage, create_package's and schedule_drone's:\n%s", log)
	}
}

// A worker on Redis streams reads its records, lag and in-flight entries
// from the Redis stream sources' metrics: its summary lines said in/s=0
// lag=0 in_flight=0 whatever it did, as they read only the Kafka
// source's.
func TestSummaryCountsRedisStreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	read := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_redisstream_read_total", Help: "read"}, []string{"stage", "stream"})
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_redisstream_lag", Help: "lag"}, []string{"stage", "stream"})
	inFlight := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_redisstream_in_flight", Help: "in flight"}, []string{"stage", "stream"})
	reg.MustRegister(read, lag, inFlight)
	read.WithLabelValues("requests", "delivery-requests").Add(120)
	read.WithLabelValues("replays", "delivery-requests-retry").Add(7)
	lag.WithLabelValues("requests", "delivery-requests").Set(40)
	lag.WithLabelValues("replays", "delivery-requests-retry").Set(2)
	inFlight.WithLabelValues("requests", "delivery-requests").Set(9)
	c, err := gatherSummary(reg)
	if err != nil {
		t.Fatal(err)
	}
	if c.in != 127 || c.replayed != 7 || c.lag != 42 || c.inFlight != 9 {
		t.Fatalf("summary of a worker on Redis streams: in %v replayed %v lag %v in flight %v; want 127, 7, 42, 9",
			c.in, c.replayed, c.lag, c.inFlight)
	}
}

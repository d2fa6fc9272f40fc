package observe_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	streamsource "github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

var quiet = slog.New(slog.DiscardHandler)

// total sums a metric family's values (counter, gauge, or histogram count).
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v += m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				v += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return v
	}
	return -1 // absent
}

// TestMetricsMoveEndToEnd runs a Kafka pipeline with retries, a breaker and
// a budget, and checks that the metrics appear, lint clean and move.
func TestMetricsMoveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Kafka pipeline with retries and a breaker (seconds): make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 4, "in")
	testenv.Produce(t, brokers, "in", 5000, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src, err := kafka.NewSource(context.Background(), kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "obs",
		Topics: []string{"in"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "orders")
	if err != nil {
		t.Fatal(err)
	}
	breaker, _ := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "svc"})
	budget, _ := backpressure.NewRetryBudget(0.2, 100)
	var calls atomic.Int64
	fn := func(_ context.Context, v []byte) ([]byte, error) {
		if calls.Add(1)%10 == 0 {
			return nil, stream.Throttled(errors.New("busy"), 0)
		}
		if string(v) == "13" {
			return nil, errors.New("bad order")
		}
		return v, nil
	}
	policy := flow.RetryPolicy{Strategy: flow.Regular, Jitter: flow.NoJitter, MaxAttempts: 5, BaseDelay: time.Millisecond}
	async := flow.MapAsync(16, fn, flow.Retry(policy), flow.Breaker(breaker), flow.Budget(budget),
		flow.Lanes(backpressure.StrictPriority(3)))
	ck := checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	g := stream.New(stream.WithPipeline("orders"), stream.WithLogger(quiet))
	// The Kafka source as the one level of a priority source: both
	// publish their numbers.
	s := source.Priority(g, backpressure.StrictPriority(1), []source.Level[[]byte]{{Name: "kafka", Source: src}})
	s = stream.Via(s, flow.Filter(func(v []byte) bool { return !strings.HasSuffix(string(v), "7") }), stream.Name("drop-7s"))
	s = stream.Via(s, flow.Prioritize(3, func(v []byte) (int, error) { return len(v) % 3, nil }), stream.Name("tier"))
	s = stream.Via(s, async, stream.Name("call"))
	s = stream.Via(s, flow.Map(func(v []byte) ([]byte, error) {
		if done.Add(1) >= 4000 {
			cancel()
		}
		return v, nil
	}), stream.Name("count"))
	stream.To(s, ck, stream.Name("checkpoint"))
	// Failures go to a Redis stream (miniredis here), for the sink's
	// metrics.
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rc.Close()
	reason := func(m *stream.Message[stream.Failure]) (redisstream.Entry, error) {
		return redisstream.Entry{Value: []byte(m.Value.Err.Error())}, nil
	}
	stream.To(g.Failures(), redisstream.NewSink(rc, "dead-letters", reason), stream.Name("dead-letter"))
	// One call finds every part: the source, the asynchronous stage with
	// its breaker and budget, the checkpoint sink.
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(g); err == nil {
		t.Error("registering a pipeline twice: no error")
	}

	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// The source still owns its partitions until Close: their gauges are
	// there.
	defer src.Close(context.Background())
	// A second pipeline reads the topic by direct assignment through the
	// Redis ownership balancer (miniredis here), for its metrics.
	bal := ownedPipeline(t, reg, brokers)
	defer bal.Close(context.Background())
	// A third reads a Redis stream (miniredis here), for its metrics.
	redisStreamPipeline(t, reg)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, name := range []string{
		"sluice_stage_received_total", "sluice_stage_emitted_total", "sluice_stage_settled_total",
		"sluice_stage_failed_total", "sluice_stage_processing_seconds", "sluice_end_to_end_latency_seconds",
		"sluice_async_calls_total", "sluice_async_call_seconds", "sluice_async_attempts", "sluice_async_message_seconds",
		"sluice_retries_total", "sluice_async_limit", "sluice_retry_budget_allowed_total",
		"sluice_kafka_records_total", "sluice_kafka_commits_total", "sluice_kafka_rebalances_total",
		"sluice_checkpoint_commits_total", "sluice_breaker_state",
		"sluice_lane_started_total", "sluice_lane_completed_total", "sluice_lane_wait_seconds", "sluice_lane_latency_seconds",
		"sluice_lane_busy_seconds_total", "sluice_priority_received_total", "sluice_priority_emitted_total",
		"sluice_ownership_owned_partitions", "sluice_ownership_members", "sluice_ownership_claims_total",
		"sluice_ownership_renewals_total", "sluice_ownership_checkpoints_total", "sluice_ownership_renewal_seconds",
		"sluice_redisstream_written_total", "sluice_redisstream_write_seconds",
	} {
		if v := total(t, reg, name); v <= 0 {
			t.Errorf("%s = %v: absent or did not move", name, v)
		}
	}
	for _, name := range []string{"sluice_stage_in_flight", "sluice_stage_buffered", "sluice_stage_blocked_seconds_total",
		"sluice_async_in_flight", "sluice_async_delayed", "sluice_breaker_transitions_total", "sluice_kafka_unsettled",
		"sluice_kafka_committed_offset", "sluice_kafka_lag", "sluice_lane_waiting", "sluice_lane_in_flight",
		"sluice_lane_desired_workers", "sluice_priority_queued", "sluice_priority_lag", "sluice_priority_paused",
		"sluice_priority_pauses_total", "sluice_ownership_stops_total", "sluice_ownership_renewal_failures_total",
		"sluice_ownership_checkpoint_age_seconds", "sluice_ownership_self_fences_total", "sluice_ownership_checkpoints_lost_total"} {
		if v := total(t, reg, name); v < 0 {
			t.Errorf("%s absent", name)
		}
	}
	// The breaker is labelled with its name, the budget with the stage
	// that uses it; the Kafka source with its stage.
	for _, c := range []struct{ metric, label, value string }{
		{"sluice_breaker_transitions_total", "dependency", "svc"},
		{"sluice_retry_budget_allowed_total", "dependency", "call"},
		{"sluice_kafka_records_total", "stage", "kafka"},
		{"sluice_async_calls_total", "stage", "call"},
		{"sluice_lane_completed_total", "priority", "0"},
		{"sluice_lane_completed_total", "priority", "2"},
		{"sluice_lane_wait_seconds", "priority", "1"},
		{"sluice_priority_emitted_total", "stage", "priority"},
	} {
		if !hasLabel(t, reg, c.metric, c.label, c.value) {
			t.Errorf("%s has no series with %s=%q", c.metric, c.label, c.value)
		}
	}
	// docs/metrics.md lists every metric exported, and exports nothing
	// it does not list.
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	name := regexp.MustCompile("`(sluice_[a-z_]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `sluice_") { // a row of a metrics table
			for _, n := range name.FindAllStringSubmatch(line, -1) {
				// The sensors worker's own, served by its command
				// (checked there), not by a pipeline's Metrics.
				if !strings.HasPrefix(n[1], "sluice_sensors_") {
					documented[n[1]] = true
				}
			}
		}
	}
	mfs, _ := reg.Gather()
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
		if !documented[mf.GetName()] {
			t.Errorf("%s is exported but not in docs/metrics.md", mf.GetName())
		}
	}
	for n := range documented {
		if !exported[n] {
			t.Errorf("docs/metrics.md lists %s, which this pipeline (every kind of component) does not export", n)
		}
	}
}

// hasLabel reports whether a series of metric has label=value.
func hasLabel(t *testing.T, reg *prometheus.Registry, metric, label, value string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}

// counted is a component publishing one counter: the test's stand-in for
// a connector of its own.
type counted struct{ n float64 }

func (c *counted) Run(ctx context.Context, out *stream.Outlet[int]) error {
	for i := range int(c.n) {
		if err := out.Send(ctx, stream.Message[int]{Value: i}); err != nil {
			return err
		}
	}
	return nil
}

func (c *counted) Instrument(stage string, m stream.Meter) {
	m.Collect(func(w stream.MetricWriter) {
		w.Counter("sluice_test_things_total", "Things.", c.n, stream.Label{Name: "stage", Value: stage})
	})
}

// TestRegisterFindsEveryPart registers a pipeline with two sources of one
// kind and two stages sharing one breaker: each source is exported under
// its stage, the shared breaker once, and gathering succeeds (no series
// collected twice).
func TestRegisterFindsEveryPart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "parts")
	if err != nil {
		t.Fatal(err)
	}
	br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	g := stream.New(stream.WithPipeline("parts"), stream.WithLogger(quiet))
	a, b := &counted{n: 1}, &counted{n: 2}
	s := stream.Merge(stream.From(g, a, stream.Name("a")), stream.From(g, b, stream.Name("b")))
	id := func(_ context.Context, x int) (int, error) { return x, nil }
	s = stream.Via(s, flow.MapAsync(2, id, flow.Breaker(br)), stream.Name("one"))
	s = stream.Via(s, flow.MapAsync(2, id, flow.Breaker(br)), stream.Name("two"))
	stream.To(s, sink.Discard[int]())
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(g); err == nil {
		t.Error("registering a pipeline that ran: no error")
	}
	if got := total(t, reg, "sluice_test_things_total"); got != 3 {
		t.Errorf("sluice_test_things_total = %v, want 1 (a) + 2 (b)", got)
	}
	for _, st := range []string{"a", "b"} {
		if !hasLabel(t, reg, "sluice_test_things_total", "stage", st) {
			t.Errorf("no series for stage %q", st)
		}
	}
	if got := total(t, reg, "sluice_breaker_state"); got != 1 {
		t.Errorf("sluice_breaker_state sums to %v: the shared breaker is exported %v times", got, got)
	}
	if total(t, reg, "sluice_async_call_seconds") <= 0 {
		t.Error("the asynchronous stages fed no call histogram")
	}
}

// TestObserveImportsOnlyTheCore checks the layering: the metrics package
// depends on the stream package and Prometheus, never on a connector or a
// stage package, so a pipeline without Kafka does not link the Kafka
// client through its metrics.
func TestObserveImportsOnlyTheCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluice-streams/sluice/"
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "github.com/twmb/franz-go"):
			t.Errorf("stream/observe links %s", dep)
		case strings.HasPrefix(dep, mod) && dep != mod+"stream" && dep != mod+"stream/observe" && !strings.HasPrefix(dep, mod+"internal/"):
			t.Errorf("stream/observe imports %s: only the stream package is allowed", dep)
		}
	}
}

func TestHandlerEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "demo")
	if err != nil {
		t.Fatal(err)
	}
	g := stream.New(stream.WithPipeline("demo"))
	stream.To(stream.Via(stream.From(g, source.Slice([]int{1, 2, 3})), flow.Map(func(x int) (int, error) { return x, nil })), sink.Discard[int]())
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, err := observe.Serve(ctx, observe.ServerConfig{Addr: "127.0.0.1:0", Gatherer: reg, Graphs: []*stream.Graph{g}, Pprof: true,
		Ready: func(context.Context) error {
			if !ready.Load() {
				return errors.New("no partitions assigned yet")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, _ := get("/healthz"); c != 200 {
		t.Fatalf("/healthz %d", c)
	}
	if c, body := get("/readyz"); c != 503 || !strings.Contains(body, "no partitions") {
		t.Fatalf("/readyz %d %q", c, body)
	}
	ready.Store(true)
	if c, _ := get("/readyz"); c != 200 {
		t.Fatalf("/readyz %d once ready", c)
	}
	if c, body := get("/metrics"); c != 200 || !strings.Contains(body, `sluice_stage_received_total{pipeline="demo",stage="map"} 3`) {
		t.Fatalf("/metrics %d:\n%s", c, body)
	}
	c, body := get("/status.json")
	var st observe.Status
	if err := json.Unmarshal([]byte(body), &st); c != 200 || err != nil || len(st.Pipelines) != 1 || len(st.Pipelines[0].Stages) != 4 { // slice, map, discard, the default dead letter
		t.Fatalf("/status.json %d %v %s", c, err, body)
	}
	if c, body := get("/status"); c != 200 || !strings.Contains(body, "status.json") {
		t.Fatalf("/status %d", c)
	}
	if c, _ := get("/debug/pprof/"); c != 200 {
		t.Fatalf("pprof %d", c)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("listening on %s, want loopback", addr)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStatusPageInHeadlessChromium renders /status of a running pipeline in
// Debian's chromium at 1280x800 and checks that the script drew every
// stage, the fan-in of the three level sources into the priority source,
// the levels by name, charts with data, and nothing wider than the window.
// The screenshot goes to the test's artifact directory (go test -artifacts
// keeps it).
func TestStatusPageInHeadlessChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("renders in headless chromium (seconds): make test runs it, -short does not")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: make test installs it (or: sudo apt-get install -y chromium)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := stream.New(stream.WithPipeline("deliveries"), stream.WithLogger(quiet))
	levels := make([]source.Level[int64], 3)
	for i, name := range []string{"requests-high", "requests-normal", "requests-low"} {
		levels[i] = source.Level[int64]{Name: name, Source: source.Generator(func(i int64) int64 { return i }, source.Rate(float64(2000*(i+1)), 100))}
	}
	s := source.Priority(g, backpressure.WeightedPriority(6, 3, 1), levels)
	s = stream.Via(s, flow.Map(func(x int64) (int64, error) {
		if x%100 == 7 {
			return 0, fmt.Errorf("unparsable %d", x)
		}
		return x * 2, nil
	}), stream.Name("parse"))
	stream.To(g.Failures(), sink.Discard[stream.Failure](), stream.Name("dead-letters"))
	s = stream.Via(s, flow.Prioritize(3, func(x int64) (int, error) { return int(x % 3), nil }), stream.Name("tier"))
	br, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "drones"})
	if err != nil {
		t.Fatal(err)
	}
	s = stream.Via(s, flow.MapAsync(64, func(ctx context.Context, x int64) (int64, error) {
		time.Sleep(time.Millisecond)
		return x, nil
	}, flow.Lanes(backpressure.WeightedPriority(6, 3, 1)), flow.Breaker(br)), stream.Name("schedule-drone"))
	stream.To(s, sink.Discard[int64](), stream.Name("checkpoint"))
	m, err := observe.New(prometheus.NewRegistry(), "deliveries")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx) }()
	addr, srvDone, err := observe.Serve(ctx, observe.ServerConfig{Addr: "127.0.0.1:0", Graphs: []*stream.Graph{g}, Metrics: []*observe.Metrics{m},
		HistoryInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A few samples of history before the page is loaded.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/history.json")
		if err != nil {
			t.Fatal(err)
		}
		var h observe.HistoryStatus
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Times) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d samples of history after 10 s", len(h.Times))
		}
	}
	dir := t.ArtifactDir()
	if d := os.Getenv("SLUICE_SCREENSHOT_DIR"); d != "" {
		dir = d
	}
	shot := filepath.Join(dir, "status.png")
	run := func(args ...string) string {
		cctx, ccancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer ccancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
			"--window-size=1280,800", "--virtual-time-budget=3000"}
		out, err := exec.CommandContext(cctx, chromium, append(base, args...)...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return string(out)
	}
	url := "http://" + addr + "/status"
	dom, _, _ := strings.Cut(run("--dump-dom", url), "<script") // what was drawn, not the script
	for _, want := range []string{"deliveries", "parse", "schedule-drone", "checkpoint", "/s", "buffer",
		// The lanes' numbers by level, named, with human headings.
		`data-level="schedule-drone/high"`, `data-level="schedule-drone/low"`, "workers wanted", "calls completed /s",
		"End-to-end latency", "Lag by partition", "Circuit breakers"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	for _, unwanted := range []string{"lane_desired_workers", `data-level="schedule-drone/0"`} {
		if strings.Contains(dom, unwanted) {
			t.Errorf("rendered page shows %q", unwanted)
		}
	}
	// Fan-in: the three level sources feed the priority source, each
	// joined to it by an edge, not drawn as a chain after it.
	if !strings.Contains(dom, `data-stage="priority" data-inputs="requests-high,requests-normal,requests-low"`) {
		t.Errorf("the priority source is not drawn with its three inputs")
	}
	for _, from := range []string{"requests-high", "requests-normal", "requests-low"} {
		if !strings.Contains(dom, fmt.Sprintf(`data-from="%s" data-to="priority"`, from)) {
			t.Errorf("no edge from %s to the priority source", from)
		}
	}
	// The charts draw data.
	attr := func(chart, name string) int {
		re := regexp.MustCompile(`data-chart="` + chart + `"[^>]*data-` + name + `="(\d+)"`)
		mm := re.FindStringSubmatch(dom)
		if mm == nil {
			return -1
		}
		n, _ := strconv.Atoi(mm[1])
		return n
	}
	for _, c := range []string{"io", "stages", "latency", "breakers", "outcomes", "level-done", "level-waiting"} {
		if n, pts := attr(c, "series"), attr(c, "points"); n <= 0 || pts <= 0 {
			t.Errorf("chart %s: %d series, %d points", c, n, pts)
		}
	}
	if n := strings.Count(dom, `class="uplot`); n < 7 {
		t.Errorf("%d charts drawn, want 7 at least", n)
	}
	// The dead-letter stage is drawn apart, in the failures row, after
	// the main flow.
	main, failures, ok := strings.Cut(dom, `class="row failures"`)
	if !ok || !strings.Contains(failures, `data-stage="dead-letters"`) || strings.Contains(main, `data-stage="dead-letters"`) ||
		!strings.Contains(main, `data-stage="checkpoint"`) {
		t.Errorf("the failure path is not drawn apart")
	}
	// It fits the window: no horizontal scrolling at 1280x800.
	sw := regexp.MustCompile(`data-scroll-width="(\d+)"`).FindStringSubmatch(dom)
	ww := regexp.MustCompile(`data-window-width="(\d+)"`).FindStringSubmatch(dom)
	if sw == nil || ww == nil {
		t.Errorf("the page recorded no widths")
	} else if a, b := atoi(sw[1]), atoi(ww[1]); a > b || b != 1280 {
		t.Errorf("page %d px wide in a window of %d px, want it to fit 1280", a, b)
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", dom)
	}
	run("--screenshot="+shot, url)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 2000 {
		t.Fatalf("screenshot %v: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if err := <-srvDone; err != nil {
		t.Fatal(err)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Two breakers of one name would publish the same series twice, and every
// scrape would fail: Register refuses them, and a Metrics takes one
// pipeline.
func TestRegisterRefusesClashes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "clash")
	if err != nil {
		t.Fatal(err)
	}
	id := func(_ context.Context, x int) (int, error) { return x, nil }
	newBreaker := func() *backpressure.Breaker {
		b, err := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "payments"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, source.Slice([]int{1})), flow.MapAsync(1, id, flow.Breaker(newBreaker())), stream.Name("one"))
	stream.To(stream.Via(s, flow.MapAsync(1, id, flow.Breaker(newBreaker())), stream.Name("two")), sink.Discard[int]())
	if err := m.Register(g); err == nil || !strings.Contains(err.Error(), `dependency="payments"`) {
		t.Fatalf("Register = %v, want the clash named", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("after a refused registration, scrapes still fail: %v", err)
	}
	other := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(other, source.Slice([]int{1})), sink.Discard[int]())
	if err := m.Register(other); err == nil {
		t.Fatal("a second pipeline on one Metrics: no error")
	}
}

// Registering while the pipeline starts either takes effect or is
// refused; it never writes what a running stage reads (run with -race).
func TestRegisterWhileRunning(t *testing.T) {
	for range 20 {
		reg := prometheus.NewRegistry()
		m, err := observe.New(reg, "racing")
		if err != nil {
			t.Fatal(err)
		}
		g := stream.New(stream.WithLogger(quiet))
		async := flow.MapAsync(4, func(_ context.Context, x int) (int, error) { return x, nil })
		stream.To(stream.Via(stream.From(g, source.Slice(make([]int, 1000))), async), sink.Discard[int]())
		regErr := make(chan error, 1)
		go func() { regErr <- m.Register(g) }()
		if err := g.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-regErr; err != nil && !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("Register: %v, want nil or a refusal (ErrInvalid)", err)
		}
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
}

// ownedPipeline runs kafka.Assigned under an ownership balancer over
// miniredis until it has read the 5,000 records of brokers' topic "in",
// registered in reg as pipeline "owned", and returns the balancer (to
// Close once the metrics are read).
func ownedPipeline(t *testing.T, reg *prometheus.Registry, brokers []string) *ownership.Balancer[[]byte] {
	t.Helper()
	m, err := observe.New(reg, "owned")
	if err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	a, err := kafka.NewAssigned(context.Background(), kafka.AssignedConfig{Conn: kafka.Conn{Brokers: brokers}, Topic: "in", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	store, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "obs", Stream: "in", Group: "g", Expiration: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bal, err := ownership.NewBalancer[[]byte](store, a, ownership.Config{ID: "obs-1", Interval: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	g := stream.New(stream.WithPipeline("owned"), stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, stream.Source[[]byte](bal), stream.Name("owned")), flow.Map(func(v []byte) ([]byte, error) {
		if n.Add(1) == 5000 {
			cancel()
		}
		return v, nil
	}), stream.Name("count"))
	stream.To(s, checkpoint.New[[]byte](bal, checkpoint.Interval(20*time.Millisecond)), stream.Name("checkpoint"))
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return bal
}

// redisStreamPipeline runs a pipeline that reads a Redis stream through a
// consumer group, registered with reg, until it has read every entry.
func redisStreamPipeline(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	m, err := observe.New(reg, "stream")
	if err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	const n = 100
	for i := range n {
		rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "events", Values: []any{"value", strconv.Itoa(i)}})
	}
	src, err := streamsource.New(context.Background(), streamsource.Config{Client: rdb, Streams: []string{"events"}, Group: "g",
		Consumer: "obs", Create: true, Block: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Int64
	g := stream.New(stream.WithPipeline("stream"), stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, src, stream.Name("events")), flow.Map(func(v []byte) ([]byte, error) {
		if got.Add(1) == n {
			cancel()
		}
		return v, nil
	}), stream.Name("count"))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond)), stream.Name("checkpoint"))
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

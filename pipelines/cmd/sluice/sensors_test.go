package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/stream/observe"
)

// sluice demo sensors, short: the three instances share the partitions,
// the second stops a third of the way and a fourth joins two thirds of
// the way — the status lines show the partitions move — the residents'
// page answers while it runs, and the summary reports every minute of
// every home stored as recounted and the dead letters as sent.
func TestSensorsDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (tens of seconds): make test runs it, -short does not")
	}
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runSensorsDemo(ctx, []string{"-duration", "9s", "-homes", "300", "-listen", "127.0.0.1:0", "-drain", "30s"}, &out)
	}()
	pageURL := regexp.MustCompile(`residents' page: (http://\S+)/homes`)
	var base string
	for base == "" {
		select {
		case err := <-done:
			t.Fatalf("the demo ended before serving its page: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if m := pageURL.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
	}
	for _, path := range []string{"/homes", "/homes/api/overview", "/status"} {
		if code, body := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	// /status shows the instances' pipelines: the three started first,
	// before the second stops once the load runs a third of its time.
	waitLive(t, base, done, &out, "the three instances started", func(live []string) bool {
		return slices.Equal(live, []string{"sensors-w1", "sensors-w2", "sensors-w3"})
	})
	// Once its first minute is written, a home has its page's data.
	for {
		code, body := get(t, base+"/homes/api/home/h000007")
		if code == http.StatusOK && strings.Contains(body, `"home":"h000007"`) {
			break
		}
		if code != http.StatusNotFound {
			t.Fatalf("GET /homes/api/home/h000007: %d %s", code, body)
		}
		select {
		case err := <-done:
			t.Fatalf("the demo ended before h000007 had a minute written: %v\n%s", err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Then it follows them: the stopped one gone, the one that joined
	// there.
	waitLive(t, base, done, &out, "w2 stopped and w4 joined", func(live []string) bool {
		return !slices.Contains(live, "sensors-w2") && slices.Contains(live, "sensors-w4")
	})
	var err error
	select {
	case err = <-done:
	case <-time.After(80 * time.Second):
		t.Fatalf("the demo did not end within 80 s:\n%s", out.String())
	}
	text := out.String()
	t.Log(text)
	if err != nil {
		t.Fatalf("demo sensors: %v", err)
	}
	if !strings.Contains(text, "verification passed") || !strings.Contains(text, " 0 missing, 0 wrong, 0 extra: ok") ||
		!strings.Contains(text, "as sent: ok") {
		t.Fatal("the summary does not report the verification passed")
	}
	checkPartitionsMoved(t, text)
}

// waitLive polls the demo's /status.json until the pipelines it lists
// satisfy ok, failing if the demo ends first.
func waitLive(t *testing.T, base string, done <-chan error, out *testenv.Buffer, what string, ok func(live []string) bool) {
	t.Helper()
	var live []string
	for {
		code, body := get(t, base+"/status.json")
		var st observe.Status
		if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
			t.Fatalf("GET /status.json: %d %v\n%.400s", code, err, body)
		}
		live = live[:0]
		for _, p := range st.Pipelines {
			live = append(live, p.Name)
		}
		if ok(live) {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the demo ended before /status showed %s (it lists %v): %v\n%s", what, live, err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var (
	statusParts = regexp.MustCompile(`\| partitions (.*) \((\d+)/(\d+) held[^)]*\)`)
	instParts   = regexp.MustCompile(`(w\d+):(\d+|stopped)`)
)

// checkPartitionsMoved reads the status lines of a demo: w2 held
// partitions, then stopped, and the others took them; w4 joined and took
// some.
func checkPartitionsMoved(t *testing.T, text string) {
	t.Helper()
	var w2Held, w2Stopped, w4Held bool
	var before map[string]int // the last counts while w2 held partitions
	tookOver := false
	for _, line := range strings.Split(text, "\n") {
		m := statusParts.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		counts := map[string]int{}
		stopped := map[string]bool{}
		for _, p := range instParts.FindAllStringSubmatch(m[1], -1) {
			if p[2] == "stopped" {
				stopped[p[1]] = true
				continue
			}
			counts[p[1]], _ = strconv.Atoi(p[2])
		}
		switch {
		case !stopped["w2"] && counts["w2"] > 0:
			w2Held, before = true, counts
		case stopped["w2"]:
			w2Stopped = true
			if before != nil && (counts["w1"] > before["w1"] || counts["w3"] > before["w3"]) {
				tookOver = true
			}
		}
		if counts["w4"] > 0 {
			w4Held = true
		}
	}
	if !w2Held || !w2Stopped || !tookOver || !w4Held {
		t.Fatalf("the status lines do not show the partitions move (w2 held: %v, w2 stopped: %v, w1 or w3 took more: %v, w4 held: %v)",
			w2Held, w2Stopped, tookOver, w4Held)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sluice run sensors against a broker and a real redis-server, fed by
// sluice loadgen sensors: every valid reading ends in a window written
// (the worker's /metrics), the page and the health endpoints answer, and
// the worker stops cleanly when its context (SIGTERM's) ends.
func TestSensorsWorkerAndLoadgen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the worker and its load over a broker and Redis (seconds): make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 4, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	redisAddr := testenv.Redis(t)
	addrs := make(chan string, 1)
	onSensorsListen = func(addr string) { addrs <- addr }
	defer func() { onSensorsListen = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runSensorsWorker(ctx, []string{"-brokers", brokers[0], "-redis", "redis://" + redisAddr + "/0", "-listen", "127.0.0.1:0",
			"-namespace", "cmdtest", "-instance-id", "only", "-interval", "300ms", "-idle-close", "1s", "-status-every", "1s"})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("the worker ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start within 30 s")
	}
	var out bytes.Buffer
	if err := runSensorsLoadgen(ctx, []string{"-brokers", brokers[0], "-homes", "200", "-minutes", "4", "-compression", "120",
		"-malformed", "0.01", "-late", "0", "-status-every", "0"}, &out); err != nil {
		t.Fatalf("loadgen sensors: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	m := regexp.MustCompile(`sent (\d+) records in \S+: \d+/s \((\d+) valid readings, (\d+) malformed, (\d+) late`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("loadgen sensors did not print what it sent and its rate:\n%s", out.String())
	}
	// A run of known length ends its simulated time at the clock, not
	// ahead of it (a broker may refuse timestamps ahead).
	ended := regexp.MustCompile(`simulated time (\S+)\n`).FindStringSubmatch(out.String())
	if ended == nil {
		t.Fatalf("loadgen sensors did not print the simulated time reached:\n%s", out.String())
	}
	if at, err := time.Parse(time.RFC3339, ended[1]); err != nil || at.After(time.Now()) || at.Before(time.Now().Add(-3*time.Minute)) {
		t.Fatalf("the simulated time ended at %s (%v), want within the few minutes before now", ended[1], err)
	}
	valid, _ := strconv.Atoi(m[2])
	if m[4] != "0" || m[3] == "0" || valid < 200*3*4*9/10 {
		t.Fatalf("sent %s valid, %s malformed, %s late; want about %d valid, some malformed, none late (-late 0)", m[2], m[3], m[4], 200*3*4)
	}
	written := regexp.MustCompile(`(?m)^sluice_sensors_readings_written_total (\d+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, metrics := get(t, "http://"+addr+"/metrics")
		if w := written.FindStringSubmatch(metrics); w != nil && w[1] == strconv.Itoa(valid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readings written did not reach the %d valid ones sent within 30 s:\n%s", valid, grep(metrics, "sluice_sensors"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The summary's figures are the metrics': every valid reading
	// aggregated, every malformed one dead-lettered, the out-of-range
	// ones and the heartbeats filtered.
	f := regexp.MustCompile(`(\d+) out of range, (\d+) heartbeats`).FindStringSubmatch(out.String())
	oor, _ := strconv.Atoi(f[1])
	hb, _ := strconv.Atoi(f[2])
	_, metrics := get(t, "http://"+addr+"/metrics")
	if got, want := summaryOfScrape(t, metrics), fmt.Sprintf("outcomes aggregated=%d dead_lettered=%s filtered=%d", valid, m[3], oor+hb); got != want {
		t.Errorf("the summary of the metrics says %q, want %q", got, want)
	}
	// Its pipeline's metrics are served too, those the dashboard's rows
	// and the alert rules read: the ownership balancer's, the stages'
	// and the Kafka source's (the summary above counts none of them
	// twice).
	for _, want := range []string{`sluice_ownership_owned_partitions{pipeline="sensors",stage="readings"} 4`,
		`sluice_ownership_members{pipeline="sensors",stage="readings"} 1`, `sluice_ownership_self_fences_total{pipeline="sensors",stage="readings"} 0`,
		`sluice_ownership_renewals_total{pipeline="sensors",stage="readings"}`, `sluice_ownership_checkpoints_total{outcome="accepted",pipeline="sensors",stage="readings"}`,
		`sluice_stage_received_total{pipeline="sensors",stage="window"}`, `sluice_stage_settled_total{outcome="dead_lettered",pipeline="sensors",stage="dead-letters"}`,
		`sluice_stage_processing_seconds_bucket{pipeline="sensors",stage="write",`, `sluice_kafka_records_total{pipeline="sensors",stage="readings"}`} {
		if !strings.Contains(metrics, "\n"+want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(metrics, `pipeline="sensors"`))
		}
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/homes": "<html", "/homes/api/home/h000001": `"home"`,
		"/metrics": `sluice_sensors_partitions_held 4`, "/status.json": `"name":"window"`} {
		if code, body := get(t, "http://"+addr+path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.400s", path, code, want, body)
		}
	}
	// The load is read: the lag of every partition is known, and comes
	// down to 0.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, metrics := get(t, "http://"+addr+"/metrics")
		if strings.Contains(metrics, "\nsluice_sensors_lag 0\n") && strings.Contains(metrics, "\nsluice_sensors_lag_unknown_partitions 0\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want a lag of 0, known for every partition, within 10 s:\n%s", grep(metrics, "sluice_sensors_lag"))
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run sensors after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run sensors did not stop within 30 s of its context's end")
	}
}

// Bad flags stop each command before it connects or starts anything,
// naming the flag and what it must be.
func TestSensorsFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "sensors", "-homes", "0"}, "-homes 0: want at least 1"},
		{[]string{"demo", "sensors", "-homes", "many"}, `-homes "many": want a whole number`},
		{[]string{"demo", "sensors", "-kinds", "5"}, "-kinds 5: want 1 to 4"},
		{[]string{"demo", "sensors", "-compression", "0"}, "-compression 0"},
		{[]string{"demo", "sensors", "-duration", "500ms"}, "less than a simulated minute"},
		{[]string{"demo", "sensors", "-duration", "-3s"}, "-duration -3s"},
		{[]string{"demo", "sensors", "-instances", "1"}, "-instances 1"},
		{[]string{"demo", "sensors", "-partitions", "0"}, "-partitions 0"},
		{[]string{"demo", "sensors", "-interval", "2s", "-expiration", "2s"}, "-expiration 2s: must be more than -interval 2s"},
		{[]string{"demo", "sensors", "-drain", "0"}, "-drain 0s"},
		{[]string{"demo", "sensors", "now"}, `unexpected argument "now"`},
		{[]string{"run", "sensors", "-interval", "0"}, "-interval 0s"},
		{[]string{"run", "sensors", "-interval", "10s", "-expiration", "5s"}, "-expiration 5s: must be more than -interval 10s"},
		{[]string{"run", "sensors", "-lateness", "-1s"}, "-lateness -1s"},
		{[]string{"run", "sensors", "-idle-close", "-1s"}, "-idle-close -1s"},
		{[]string{"run", "sensors", "-writers", "0"}, "-writers 0"},
		{[]string{"run", "sensors", "-lateness", "0"}, "-lateness 0s: must be more than 0"},
		{[]string{"run", "sensors", "-max-unsettled", "0"}, "-max-unsettled 0"},
		{[]string{"run", "sensors", "-retention", "30s"}, "-retention 30s"},
		{[]string{"run", "sensors", "-instance-id", ""}, "-instance-id"},
		{[]string{"run", "sensors", "-dead-letter-topic", "sensor-readings"}, "-dead-letter-topic"},
		{[]string{"run", "sensors", "-redis", "nohost"}, `-redis "nohost"`},
		{[]string{"run", "sensors", "-namespace", "a:b"}, "-namespace"},
		{[]string{"run", "sensors", "-status-every", "-1s"}, "-status-every"},
		{[]string{"loadgen", "sensors", "-homes", "0"}, "-homes 0"},
		{[]string{"loadgen", "sensors", "-kinds", "0"}, "-kinds 0"},
		{[]string{"loadgen", "sensors", "-compression", "-60"}, "-compression -60"},
		{[]string{"loadgen", "sensors", "-minutes", "3", "-duration", "1s"}, "give one of them"},
		{[]string{"loadgen", "sensors", "-minutes", "-1"}, "-minutes -1"},
		{[]string{"loadgen", "sensors", "-malformed", "0.6"}, "-malformed 0.6"},
		{[]string{"loadgen", "sensors", "-malformed", "0.3", "-late", "0.3"}, "together"},
		{[]string{"loadgen", "sensors", "-add-kind-after", "-1s"}, "-add-kind-after -1s"},
		{[]string{"loadgen", "sensors", "-seed", "0"}, "-seed 0"},
	} {
		args := append(append([]string{}, c.args...), "-brokers", "127.0.0.1:1")
		if c.args[0] == "demo" {
			args = c.args
		}
		err := run(args)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%v: %v, want an error naming %q before connecting", c.args, err, c.want)
		}
	}
	t.Setenv("SLUICE_DEMO_SENSORS_HOMES", "lots")
	if err := run([]string{"demo", "sensors"}); err == nil || !strings.Contains(err.Error(), `$SLUICE_DEMO_SENSORS_HOMES="lots" (-homes): want a whole number`) {
		t.Errorf("a bad $SLUICE_DEMO_SENSORS_HOMES: %v", err)
	}
	t.Setenv("SLUICE_DEMO_SENSORS_HOMES", "")
	// Good flags get as far as the unreachable broker, named.
	for _, args := range [][]string{{"run", "sensors", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1"},
		{"loadgen", "sensors", "-brokers", "127.0.0.1:1"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var err error
		if args[0] == "run" {
			err = runSensorsWorker(ctx, args[2:])
		} else {
			err = runSensorsLoadgen(ctx, args[2:], io.Discard)
		}
		cancel()
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%v: %v, want an error naming the unreachable broker", args, err)
		}
	}
}

// The sensors commands' flags have variables of their own
// (TestEveryFlagHasAVariable checks each names one and is set by it): the
// demo's and the load generator's are theirs, the worker's those of
// sluice run.
func TestSensorsFlagVariablesAreTheirCommands(t *testing.T) {
	for cmd, want := range map[string]string{"demo sensors": "SLUICE_DEMO_SENSORS_HOMES", "loadgen sensors": "SLUICE_LOADGEN_SENSORS_HOMES"} {
		if got := flagEnv(cmd, "homes"); got != want {
			t.Errorf("%s -homes: $%s, want $%s", cmd, got, want)
		}
	}
	if got := flagEnv("run", "instance-id"); got != "SLUICE_INSTANCE_ID" {
		t.Errorf("run sensors -instance-id: $%s", got)
	}
}

// sluice -h and the usage list the sensors commands.
func TestSensorsUsage(t *testing.T) {
	var b strings.Builder
	printRootHelp(&b)
	u := b.String()
	for _, want := range []string{"demo sensors", "run sensors", "loadgen sensors"} {
		if !strings.Contains(u, want) {
			t.Errorf("the usage does not list %q", want)
		}
	}
}

// summaryOfScrape is the outcomes line the worker's summary would log of
// a scrape of its /metrics, counted from 0.
func summaryOfScrape(t *testing.T, text string) string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	now, err := gatherSummary(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return slices.Collect(maps.Values(mfs)), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range summaryRecords(summaryCounts{}, now, 10*time.Second, 0) {
		if rec[0].Value.String() == "outcomes" {
			var b strings.Builder
			b.WriteString("outcomes")
			for _, a := range rec[1:] {
				fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
			}
			return b.String()
		}
	}
	return ""
}

// docs/metrics.md lists every sluice_sensors_* metric the worker serves,
// and no other of that prefix.
func TestSensorsMetricsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `sluice_sensors_") { // a row of a metrics table
			for _, n := range regexp.MustCompile("`(sluice_sensors_[a-z0-9_]+)`").FindAllStringSubmatch(line, -1) {
				documented[n[1]] = true
			}
		}
	}
	ch := make(chan *prometheus.Desc, 64)
	sensorsCollector{}.Describe(ch)
	close(ch)
	served := map[string]bool{}
	for d := range ch {
		m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		served[m[1]] = true
		if !documented[m[1]] {
			t.Errorf("%s is served but not in docs/metrics.md", m[1])
		}
	}
	if len(served) < 10 {
		t.Fatalf("read %d metrics of the worker's collector, want its 11", len(served))
	}
	for n := range documented {
		if !served[n] {
			t.Errorf("docs/metrics.md lists %s, which the sensors worker does not serve", n)
		}
	}
}

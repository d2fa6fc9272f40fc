package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// keptSpans is an in-memory exporter that outlives the providers shut
// down into it: each command shuts its own down when it ends, and the
// spans of all of them are read at the end.
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

// traceSystem is the system as it is deployed, in one process: a broker,
// the services over HTTP, the scheduler and the supervisor started as
// their commands are, each tracing into spans.
type traceSystem struct {
	brokers, services, admin string
	spans                    *tracetest.InMemoryExporter
	stop                     func() // stops the workers; their spans are then all exported
}

func startTraceSystem(t *testing.T) *traceSystem {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "delivery-requests", "delivery-failures", "delivery-dead-letters",
		"delivery-failures-retry", "delivery-compensation-dead-letters", "delivery-requests-retry"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := &traceSystem{brokers: c.ListenAddrs()[0], spans: tracetest.NewInMemoryExporter()}
	s.services, s.admin = startServices(t, "-transient", "0", "-throttle", "0", "-permanent", "0",
		"-min-latency", "1ms", "-max-latency", "2ms")
	spanExporter = func() sdktrace.SpanExporter { return keptSpans{s.spans} }
	t.Cleanup(func() { spanExporter = nil })
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 2)
	onListen = func(which, _ string) { ready <- which }
	done := make(chan error, 2)
	for _, which := range []string{"delivery", "supervisor"} {
		go func() {
			done <- runWorker(ctx, []string{which, "-brokers", s.brokers, "-listen", "127.0.0.1:0", "-backends", s.services,
				"-replay-after", "200ms", "-max-replay-delay", "1s", "-instance-id", which + "-0", "-summary-every", "0", "-trace-sample", "1"})
		}()
	}
	for range 2 {
		select {
		case <-ready:
		case err := <-done:
			cancel()
			t.Fatalf("a worker ended: %v", err)
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatal("the workers did not start within 30 s")
		}
	}
	onListen = nil
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	}
	t.Cleanup(s.stop)
	return s
}

// load sends the load generator's requests of cfg, traced into the
// system's spans, and returns their ids by kind.
func (s *traceSystem) load(t *testing.T, cfg loadgen.Config) map[loadgen.Kind][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(keptSpans{s.spans}),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "sluice-loadgen"))))
	defer tp.Shutdown(context.Background())
	cfg.TracerProvider = tp
	sent := loadgen.NewSent()
	if err := loadgen.Run(context.Background(), cl, cfg, sent); err != nil {
		t.Fatal(err)
	}
	kinds, _ := sent.Kinds()
	ids := map[loadgen.Kind][]string{}
	for id, k := range kinds {
		ids[k] = append(ids[k], id)
	}
	return ids
}

// produce writes the request r to the requests' topic with headers, as a
// producer other than the load generator would.
func (s *traceSystem) produce(t *testing.T, r delivery.Request, headers ...kgo.RecordHeader) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: "delivery-requests", Key: []byte(r.ID), Value: b, Headers: headers}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitLedger waits until done says the services' ledger shows what the
// requests ids should come to.
func (s *traceSystem) waitLedger(t *testing.T, what string, ids []string, done func(*delivery.LedgerSnapshot, string) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l, err := delivery.FetchLedger(context.Background(), http.DefaultClient, s.admin)
		if err == nil && !slices.ContainsFunc(ids, func(id string) bool { return !done(l, id) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests %v not %s within 30 s (%v)", ids, what, err)
		}
	}
}

// traces groups spans by trace.
type traces map[trace.TraceID][]tracetest.SpanStub

func tracesOf(spans []tracetest.SpanStub) traces {
	ts := traces{}
	for _, s := range spans {
		ts[s.SpanContext.TraceID()] = append(ts[s.SpanContext.TraceID()], s)
	}
	return ts
}

// of returns the traces of the request id: those with an HTTP call whose
// URL names it.
func (ts traces) of(id string) []trace.TraceID {
	var out []trace.TraceID
	for tid, spans := range ts {
		if slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool {
			return s.SpanKind == trace.SpanKindClient && strings.Contains(attr(s, "url.full"), "/"+id)
		}) {
			out = append(out, tid)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// named returns the spans of the trace called name.
func named(spans []tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// calls returns the HTTP calls (client spans) that are children of one of
// parents.
func calls(spans, parents []tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindClient && slices.ContainsFunc(parents, func(p tracetest.SpanStub) bool {
			return p.SpanContext.SpanID() == s.Parent.SpanID()
		}) {
			out = append(out, s)
		}
	}
	return out
}

// checkSteps checks that the trace has a span of each step of the
// scheduler, each with its HTTP attempts as children.
func checkSteps(t *testing.T, id string, spans []tracetest.SpanStub) {
	t.Helper()
	for _, step := range delivery.Steps {
		st := named(spans, string(step))
		if len(st) == 0 || len(calls(spans, st)) == 0 {
			t.Errorf("request %s: step %s has %d spans and %d HTTP calls in its trace, want one at least each:\n%s",
				id, step, len(st), len(calls(spans, st)), spanTree(spans))
		}
	}
}

// spanTree writes the trace as an indented tree of its spans, each with
// its service and its length, children in the order they started.
func spanTree(spans []tracetest.SpanStub) string {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	has := map[trace.SpanID]bool{}
	for _, s := range spans {
		has[s.SpanContext.SpanID()] = true
	}
	var b strings.Builder
	var walk func(parent trace.SpanID, root bool, depth int)
	walk = func(parent trace.SpanID, root bool, depth int) {
		for _, s := range spans {
			if root && has[s.Parent.SpanID()] || !root && s.Parent.SpanID() != parent {
				continue
			}
			service := ""
			for _, a := range s.Resource.Attributes() {
				if a.Key == "service.name" {
					service = a.Value.AsString()
				}
			}
			label := s.Name
			if u := attr(s, "url.full"); u != "" {
				label += " " + u[strings.Index(u[len("http://"):], "/")+len("http://"):]
				if code := attr(s, "http.response.status_code"); code != "" {
					label += " " + code
				}
			}
			fmt.Fprintf(&b, "%s%-*s %-18s %v\n", strings.Repeat("  ", depth), 56-2*depth, label, service,
				s.EndTime.Sub(s.StartTime).Round(10*time.Microsecond))
			walk(s.SpanContext.SpanID(), false, depth+1)
		}
	}
	walk(trace.SpanID{}, true, 0)
	return b.String()
}

// TestTraceFollowsEachRequest sends requests through the system as it is
// deployed — the load generator, the scheduler and the supervisor as
// their commands run them, the services over HTTP — and checks that each
// request is one trace from its production to its end: the five steps
// with their HTTP calls; a request throttled and parked has its replay in
// the same trace; a request compensated has the supervisor's undos in it
// too.
func TestTraceFollowsEachRequest(t *testing.T) {
	s := startTraceSystem(t)
	ctx := context.Background()
	cl := &http.Client{Timeout: 10 * time.Second}
	live := func(l *delivery.LedgerSnapshot, id string) bool { return l.Live("deliveries", id) }

	// Two requests that go through.
	plain := s.load(t, loadgen.Config{Topic: "delivery-requests", Rate: 4, Duration: 500 * time.Millisecond, Seed: 1})[loadgen.Deliverable]
	if len(plain) == 0 {
		t.Fatal("the load generator sent no deliverable request")
	}
	s.waitLedger(t, "delivered", plain, live)

	// One whose traceparent is malformed: processed as any other, in a
	// trace of its own.
	bad := delivery.Request{ID: "d-00000300", Owner: "acct-1", Pickup: delivery.Location{Lat: 47.6, Lon: -122.3},
		Dropoff: delivery.Location{Lat: 47.7, Lon: -122.2}, Size: "small", WeightKg: 1, Deadline: time.Now().Add(time.Hour).UTC()}
	s.produce(t, bad, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-not-a-trace-01")})
	s.waitLedger(t, "delivered", []string{bad.ID}, live)

	// One throttled by the drone service for longer than its retries:
	// parked, then replayed once the service takes calls again.
	if _, err := delivery.StartFault(ctx, cl, s.admin, delivery.Fault{Service: "drones", Status: 429, For: time.Second}); err != nil {
		t.Fatal(err)
	}
	parked := s.load(t, loadgen.Config{Topic: "delivery-requests", Rate: 1, Duration: 100 * time.Millisecond, Seed: 2, FirstID: 100})[loadgen.Deliverable]
	s.waitLedger(t, "delivered after their parking", parked, live)

	// One the drone service refuses for good (a pickup no base serves):
	// compensated by the supervisor.
	undeliverable := s.load(t, loadgen.Config{Topic: "delivery-requests", Rate: 1, Duration: 100 * time.Millisecond, Seed: 3,
		FirstID: 200, Undeliverable: 1})[loadgen.Undeliverable]
	s.waitLedger(t, "compensated", undeliverable, func(l *delivery.LedgerSnapshot, id string) bool { return l.Undone("packages", id) })

	s.stop()
	ts := tracesOf(s.spans.GetSpans())
	one := func(id string) []tracetest.SpanStub {
		t.Helper()
		ids := ts.of(id)
		if len(ids) != 1 {
			t.Fatalf("request %s is in %d traces, want 1", id, len(ids))
		}
		spans := ts[ids[0]]
		if sends := named(spans, "send delivery-requests"); len(sends) != 1 || sends[0].Parent.IsValid() {
			t.Errorf("request %s: %d send spans, want 1, the trace's root:\n%s", id, len(sends), spanTree(spans))
		}
		return spans
	}
	for _, id := range plain {
		spans := one(id)
		checkSteps(t, id, spans)
		t.Logf("the trace of request %s:\n%s", id, spanTree(spans))
	}
	badTraces := ts.of(bad.ID)
	if len(badTraces) != 1 {
		t.Fatalf("the request with a malformed traceparent is in %d traces, want 1", len(badTraces))
	}
	spans := ts[badTraces[0]]
	if recv := named(spans, "receive delivery-requests"); len(recv) != 1 || recv[0].Parent.IsValid() {
		t.Errorf("the request with a malformed traceparent: want its receive span the root of a new trace:\n%s", spanTree(spans))
	}
	checkSteps(t, bad.ID, spans)
	for _, id := range parked {
		spans := one(id)
		checkSteps(t, id, spans)
		drone := named(spans, string(delivery.StepDrone))
		var throttled int
		for _, c := range calls(spans, drone) {
			if attr(c, "http.response.status_code") == "429" {
				throttled++
			}
		}
		if replays := named(spans, "receive delivery-requests-retry"); len(replays) == 0 || throttled == 0 || len(drone) < 2 {
			t.Errorf("request %s: %d replays, %d throttled calls and %d drone steps in its trace, want a replay after a throttled call:\n%s",
				id, len(replays), throttled, len(drone), spanTree(spans))
		}
		t.Logf("the trace of request %s, parked and replayed:\n%s", id, spanTree(spans))
	}
	for _, id := range undeliverable {
		spans := one(id)
		sup := named(spans, "receive delivery-failures")
		var deletes int
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindClient && attr(s, "http.request.method") == "DELETE" {
				deletes++
			}
		}
		if len(sup) == 0 || deletes < 3 {
			t.Errorf("request %s: %d supervisor receive spans and %d DELETE calls in its trace, want the compensation's three undos:\n%s",
				id, len(sup), deletes, spanTree(spans))
		}
		t.Logf("the trace of request %s, compensated:\n%s", id, spanTree(spans))
	}
}

// otlpReceiver is a collector's OTLP/HTTP traces endpoint: it counts the
// spans it receives by service.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    map[string]int
	requests int
	bad      []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests++
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		o.bad = append(o.bad, fmt.Sprintf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type")))
		http.Error(w, "not an OTLP traces request", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		o.bad = append(o.bad, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.Resource.GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			o.spans[service] += len(ss.Spans)
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestOtlpExportFromTheCommands runs the scheduler and the load generator
// with -otlp-endpoint naming a collector (a test's OTLP/HTTP receiver):
// both send it their spans, under their service names, by the time they
// have stopped.
func TestOtlpExportFromTheCommands(t *testing.T) {
	rcv := &otlpReceiver{spans: map[string]int{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "delivery-requests", "delivery-failures", "delivery-dead-letters",
		"delivery-requests-retry"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	onListen = func(_, addr string) { addrs <- addr }
	defer func() { onListen = nil }()
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"delivery", "-brokers", brokers, "-listen", "127.0.0.1:0", "-backends", "sim",
			"-otlp-endpoint", srv.URL, "-summary-every", "0", "-trace-url", "http://jaeger.test/trace/{trace_id}"})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("worker ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start")
	}
	// The load generator's endpoint without a scheme: http:// is assumed.
	sent, err := loadgenCmd(ctx, []string{"-brokers", brokers, "-rate", "20", "-burst", "0", "-duration", "500ms",
		"-otlp-endpoint", srv.URL[len("http://"):], "-trace-sample", "1", "-progress-every", "0"})
	if err != nil {
		t.Fatal(err)
	}
	kinds, dups := sent.Kinds()
	want := len(kinds) + dups
	completed := regexp.MustCompile(`sluice_stage_received_total\{pipeline="delivery",stage="checkpoint"\} (\d+)`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n := metricValue(t, addr, completed); n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %d requests did not all reach the checkpoint", want)
		}
	}
	checkSlowest(t, addr)
	checkExemplars(t, addr)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	t.Logf("%d export requests, spans by service %v", rcv.requests, rcv.spans)
	if len(rcv.bad) > 0 {
		t.Fatalf("requests the receiver refused: %q", rcv.bad)
	}
	// A send span per request; at least a receive span and five step spans
	// per request that went through every step (the rest stop earlier).
	if rcv.spans["sluice-loadgen"] != want || rcv.spans["sluice-delivery"] < want {
		t.Fatalf("spans received by service %v, want %d from sluice-loadgen and at least as many from sluice-delivery", rcv.spans, want)
	}
}

// checkSlowest checks that the worker's /status/traces names, for each
// step, its slowest traced call, linked to its trace.
func checkSlowest(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status/traces.json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Calls []slowCall }
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]slowCall{}
	for _, c := range got.Calls {
		stages[c.Stage] = c
	}
	for _, step := range append(slices.Clone(delivery.Steps), "end to end") {
		c, ok := stages[string(step)]
		if !ok || len(c.TraceID) != 32 || c.Link != "http://jaeger.test/trace/"+c.TraceID || c.Pipeline != "delivery" || c.Seconds <= 0 {
			t.Errorf("/status/traces.json: %s is %+v, want its slowest call's trace, linked", step, c)
		}
	}
	resp, err = http.Get("http://" + addr + "/status/traces")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if c := stages[string(delivery.StepDrone)]; !strings.Contains(string(page), `<a href="`+c.Link+`">`+c.TraceID+`</a>`) {
		t.Errorf("/status/traces has no link to schedule_drone's trace %s:\n%s", c.TraceID, page)
	}
}

// checkExemplars checks that a traced worker's /metrics answers a
// scraper asking for OpenMetrics (Prometheus's default Accept) with the
// exemplars of its latency histograms.
func checkExemplars(t *testing.T, addr string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	re := regexp.MustCompile(`(?m)^sluice_end_to_end_latency_seconds_bucket\{[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}"\}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || !re.Match(b) {
		t.Errorf("a traced worker's /metrics answered %q with no exemplar on sluice_end_to_end_latency_seconds", ct)
	}
}

// metricValue reads the first number re's group finds on the worker's
// /metrics at addr (0 if none).
func metricValue(t *testing.T, addr string, re *regexp.Regexp) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := re.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// A collector that cannot be reached costs the spans, with a warning, and
// nothing else: starting a span and stopping the provider return. A
// malformed endpoint turns tracing off, with a warning.
func TestTraceEndpointUnreachableOrMalformed(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	tf := traceFlags{service: "sluice-delivery", endpoint: "http://127.0.0.1:1", sample: 1}
	tr := tf.start(logger, "delivery-0")
	if tr.Provider() == nil {
		t.Fatal("tracing is off with an endpoint given")
	}
	_, span := tr.Provider().Tracer("test").Start(context.Background(), "work")
	span.End()
	tr.Shutdown(logger)
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "traces:") {
		t.Fatalf("no warning that the spans were not sent:\n%s", got)
	}

	for _, bad := range []string{"ftp://collector:4318", "http://", "http://[::1"} {
		logs.Reset()
		tf.endpoint = bad
		if tr := tf.start(logger, ""); tr.Provider() != nil {
			t.Errorf("-otlp-endpoint %q: tracing on, want it off", bad)
		}
		if !strings.Contains(logs.String(), "tracing off") {
			t.Errorf("-otlp-endpoint %q: no warning:\n%s", bad, logs.String())
		}
	}
	for in, want := range map[string]string{
		"localhost:4318":                 "http://localhost:4318/v1/traces",
		"http://localhost:4318/":         "http://localhost:4318/v1/traces",
		"https://otel.example/v1/traces": "https://otel.example/v1/traces",
		"http://gateway:4318/otlp":       "http://gateway:4318/otlp/v1/traces",
	} {
		if got, err := traceEndpoint(in); got != want || err != nil {
			t.Errorf("traceEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A share to sample outside [0, 1] stops the command, naming the flag.
func TestTraceSampleOutOfRange(t *testing.T) {
	for _, v := range []string{"-0.1", "1.5", "NaN"} {
		if err := runWorker(context.Background(), []string{"delivery", "-brokers", "127.0.0.1:1", "-trace-sample", v}); err == nil ||
			!strings.Contains(err.Error(), "-trace-sample") {
			t.Errorf("run delivery -trace-sample %s: %v, want an error naming the flag", v, err)
		}
		if _, err := loadgenCmd(context.Background(), []string{"-brokers", "127.0.0.1:1", "-trace-sample", v}); err == nil ||
			!strings.Contains(err.Error(), "-trace-sample") {
			t.Errorf("loadgen -trace-sample %s: %v, want an error naming the flag", v, err)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The sampler: -trace-sample when given, else the OTel variables, else
// 1%; always parent-based when it is ours.
func TestTraceSamplerFromFlagsAndVariables(t *testing.T) {
	parse := func(args ...string) *traceFlags {
		fs := flag.NewFlagSet("run delivery", flag.ContinueOnError)
		tf := &traceFlags{}
		tf.register(fs, "sluice-delivery", true)
		if err := parseFlags("run", fs, args); err != nil {
			t.Fatal(err)
		}
		return tf
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "")
	for _, c := range []struct {
		sampler, arg, sample string
		args                 []string
		want                 string
	}{
		{want: "parent-based, 1% of new traces"},
		{arg: "0.25", want: "parent-based, 25% of new traces"},
		{arg: "1", want: "parent-based, all new traces"},
		{sampler: "always_on", want: "$OTEL_TRACES_SAMPLER=always_on: all traces"},
		{sampler: "parentbased_traceidratio", arg: "0.1", want: "$OTEL_TRACES_SAMPLER=parentbased_traceidratio: parent-based, 10% of new traces"},
		{sampler: "always_on", arg: "0.25", args: []string{"-trace-sample", "0.5"}, want: "parent-based, 50% of new traces"},
		{sampler: "always_on", sample: "0.75", want: "parent-based, 75% of new traces"},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		t.Setenv("SLUICE_TRACE_SAMPLE", c.sample)
		s, desc, err := parse(c.args...).sampler()
		if err != nil || desc != c.want || (strings.HasPrefix(c.want, "parent") && !strings.HasPrefix(s.Description(), "ParentBased")) {
			t.Errorf("%+v: sampler %v %q %v; want %q", c, s, desc, err, c.want)
		}
	}
}

// On Redis streams too, each request's entry carries the traceparent of
// its send span, as a field beside its other headers.
func TestTraceparentOnRedisStreams(t *testing.T) {
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	spans := tracetest.NewInMemoryExporter()
	spanExporter = func() sdktrace.SpanExporter { return keptSpans{spans} }
	defer func() { spanExporter = nil }()
	loadgenOutput = io.Discard
	defer func() { loadgenOutput = os.Stdout }()
	sent, err := loadgenCmd(context.Background(), []string{"-transport", "redis", "-redis", "redis://" + addr + "/0",
		"-topic", "reqs", "-rate", "200", "-burst", "0", "-duration", "200ms", "-trace-sample", "1", "-progress-every", "0"})
	if err != nil {
		t.Fatal(err)
	}
	sends := map[string]bool{}
	for _, s := range spans.GetSpans() {
		sends[s.SpanContext.TraceID().String()+"-"+s.SpanContext.SpanID().String()] = true
	}
	recs := streamRecords(t, rc, "reqs")
	if int64(len(recs)) != sent.Total() || len(recs) == 0 {
		t.Fatalf("%d entries, %d acknowledged", len(recs), sent.Total())
	}
	for _, r := range recs {
		var tp string
		for _, h := range r.Headers {
			if h.Key == "traceparent" {
				tp = string(h.Value)
			}
		}
		if len(tp) != 55 || !sends[tp[3:52]] || !strings.HasSuffix(tp, "-01") {
			t.Fatalf("entry of %s: traceparent %q, want its sampled send span's", r.Key, tp)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

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
				"-replay-after", "200ms", "-max-replay-delay", "1s", "-instance-id", which + "-0", "-summary-every", "0"})
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

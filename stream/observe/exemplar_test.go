package observe_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// In a traced pipeline the end-to-end and call latency histograms keep
// the trace id of a sampled observation as their exemplar, which /metrics
// serves, with ServerConfig.OpenMetrics, to a scraper that asks for
// OpenMetrics: a Prometheus server with its default Accept.
func TestExemplarsOnMetrics(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reg := runOneMessage(t, "traced", -20*time.Millisecond, []byte("00-"+traceID+"-00f067aa0ba902b7-01"), stream.WithTracerProvider(tp))
	srv := newServer(t, observe.ServerConfig{Gatherer: reg, OpenMetrics: true})
	body, ct := scrapeWith(t, srv, prometheusAccept)
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("content type %q", ct)
	}
	for _, name := range []string{"sluice_end_to_end_latency_seconds_bucket", "sluice_async_call_seconds_bucket"} {
		re := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} 1 # \{trace_id="` + traceID + `"\} `)
		if !re.MatchString(body) {
			t.Errorf("no exemplar of trace %s on %s:\n%s", traceID, name, grepLines(body, name))
		}
	}
}

// Untraced, no observation has an exemplar.
func TestNoExemplarsUntraced(t *testing.T) {
	reg := runOneMessage(t, "plain", 0, []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	srv := newServer(t, observe.ServerConfig{Gatherer: reg, OpenMetrics: true})
	b, ct := scrapeWith(t, srv, prometheusAccept)
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("content type %q", ct)
	}
	if strings.Contains(b, "trace_id") || !strings.Contains(b, "sluice_end_to_end_latency_seconds_count") {
		t.Fatalf("an exemplar without tracing, or no latency histogram:\n%s", grepLines(b, "latency"))
	}
}

func newServer(t *testing.T, cfg observe.ServerConfig) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Addr = "127.0.0.1:0"
	addr, done, err := observe.Serve(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + addr
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// runOneMessage runs a pipeline named name (with opts) of one message,
// its timestamp age ago and its traceparent tp (none if nil), through a
// MapAsync stage, its metrics registered in the registry it returns.
func runOneMessage(t *testing.T, name string, age time.Duration, tp []byte, opts ...stream.Option) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	g := stream.New(append([]stream.Option{stream.WithPipeline(name)}, opts...)...)
	src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
		m := stream.Message[int]{Value: 1}
		m.Timestamp = time.Now().Add(age)
		if tp != nil {
			m.Headers = []stream.Header{{Key: "traceparent", Value: tp}}
		}
		return out.Send(ctx, m)
	})
	stream.To(stream.Via(stream.From(g, src), flow.MapAsync(1, func(_ context.Context, x int) (int, error) { return x, nil })), sink.Discard[int]())
	if err := m.Register(g); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return reg
}

package main

import (
	"flag"
	"strings"
	"testing"
)

// With tracing on, a $OTEL_TRACES_SAMPLER or $OTEL_TRACES_SAMPLER_ARG the
// command cannot use stops it at start, naming the variable, rather than
// sampling every trace (or 1%) and blaming the exporter; with tracing off
// they are not read.
func TestTraceSamplerVariablesRefused(t *testing.T) {
	check := func(args ...string) error {
		fs := flag.NewFlagSet("run delivery", flag.ContinueOnError)
		tf := &traceFlags{}
		tf.register(fs, "sluice-delivery", true)
		if err := parseFlags("run", fs, args); err != nil {
			t.Fatal(err)
		}
		return tf.check()
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	on := []string{"-otlp-endpoint", "localhost:4318"}
	for _, c := range []struct{ sampler, arg, want string }{
		{"nonsense", "", "OTEL_TRACES_SAMPLER="},
		{"", "lots", "OTEL_TRACES_SAMPLER_ARG"},
		{"parentbased_traceidratio", "lots", "OTEL_TRACES_SAMPLER_ARG"},
		{"traceidratio", "5", "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		if err := check(on...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OTEL_TRACES_SAMPLER=%q OTEL_TRACES_SAMPLER_ARG=%q: %v, want an error naming %s", c.sampler, c.arg, err, c.want)
		}
		if err := check(); err != nil {
			t.Errorf("tracing off, OTEL_TRACES_SAMPLER=%q OTEL_TRACES_SAMPLER_ARG=%q: %v", c.sampler, c.arg, err)
		}
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
	if err := check(on...); err != nil {
		t.Errorf("a valid sampler refused: %v", err)
	}
}

// The startup line names the URL the exporter sends to, /v1/traces
// joined to a base URL given as $OTEL_EXPORTER_OTLP_ENDPOINT.
func TestTraceOtlpEndpointFromVariableLogged(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":       "http://collector:4318/v1/traces",
		"http://collector:4318/":      "http://collector:4318/v1/traces",
		"https://gateway/otlp":        "https://gateway/otlp/v1/traces",
		"http://c:4318/otlp/?x=1#top": "http://c:4318/otlp/v1/traces?x=1#top",
	} {
		if got := baseEndpoint(in); got != want {
			t.Errorf("baseEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

// The load generator's -trace-sample help says its share is the whole
// system's; -otlp-endpoint's gives the host:port form and the path rule.
func TestTraceFlagsHelp(t *testing.T) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var tf traceFlags
	tf.register(fs, "sluice-delivery", true)
	if u := fs.Lookup("otlp-endpoint").Usage; !strings.Contains(u, "localhost:4318 (http:// assumed)") || !strings.Contains(u, "/v1/traces is appended") {
		t.Errorf("-otlp-endpoint help: %s", u)
	}
}

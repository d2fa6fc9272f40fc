package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// defaultTraceSample is the share of new traces a command samples unless
// told otherwise: a worker follows the decision a record's traceparent
// carries (parent-based), so the load generator's share is, in practice,
// the whole system's.
const defaultTraceSample = 0.01

// traceFlags are the tracing flags of the workers, the load generator and
// the demo. Tracing is off unless an endpoint is given: -otlp-endpoint,
// or $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / $OTEL_EXPORTER_OTLP_ENDPOINT.
type traceFlags struct {
	service  string // service.name unless $OTEL_SERVICE_NAME says another
	endpoint string
	sample   float64
	url      string // -trace-url: a link to a trace, {trace_id} replaced
	fs       *flag.FlagSet
}

// register adds -otlp-endpoint and -trace-sample (and, with status, the
// -trace-url of the /status page's links) to fs.
func (t *traceFlags) register(fs *flag.FlagSet, service string, status bool) {
	t.service, t.fs = service, fs
	fs.StringVar(&t.endpoint, "otlp-endpoint", "",
		"send traces over OTLP/HTTP to this collector: http://localhost:4318, or localhost:4318 (http:// assumed); "+
			"/v1/traces is appended to the URL's path unless it ends with it; "+
			"empty: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT if set, else no tracing. "+
			"A collector that is down never slows the work: spans are sent in batches and dropped, with a warning, when it cannot take them")
	fs.Float64Var(&t.sample, "trace-sample", defaultTraceSample,
		"share of new traces sampled, 0 to 1 (a record that carries a traceparent keeps its producer's decision); "+
			"unless given, $OTEL_TRACES_SAMPLER and $OTEL_TRACES_SAMPLER_ARG choose the sampler as the OpenTelemetry SDK reads them")
	if status {
		fs.StringVar(&t.url, "trace-url", "",
			"with tracing on: link each stage's slowest recent call on /status/traces to its trace, "+
				"this URL with {trace_id} replaced, e.g. http://localhost:16686/trace/{trace_id} (Jaeger)")
	}
}

// check reports a -trace-sample outside [0, 1] and, when tracing is on,
// a $OTEL_TRACES_SAMPLER or $OTEL_TRACES_SAMPLER_ARG the command cannot
// use: a mistyped sampler would otherwise sample every trace.
func (t *traceFlags) check() error {
	if !(t.sample >= 0 && t.sample <= 1) {
		return fmt.Errorf("-trace-sample %v: want a share from 0 to 1 (0.01: one trace in a hundred)", t.sample)
	}
	if !t.on() {
		return nil
	}
	_, _, err := t.sampler()
	return err
}

// on says whether tracing is asked for: an endpoint, as a flag or a
// variable.
func (t *traceFlags) on() bool {
	return t.endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// tracing is a TracerProvider built from the flags, or none (nil) when
// tracing is off; Shutdown flushes what is left, within a bound.
type tracing struct {
	tp *sdktrace.TracerProvider
}

// Provider is the TracerProvider to hand to the pipelines: nil when
// tracing is off (never a nil pointer in the interface).
func (t tracing) Provider() trace.TracerProvider {
	if t.tp == nil {
		return nil
	}
	return t.tp
}

// Shutdown sends the spans not sent yet, giving up after 5 s: an
// unreachable collector must not hold a stopping worker.
func (t tracing) Shutdown(logger *slog.Logger) {
	if t.tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		logger.Warn("traces: the last spans were not sent", "err", err)
	}
}

// start builds the TracerProvider the flags ask for: none (a zero tracing)
// without an endpoint. instance is service.instance.id (the host's name
// if empty). A malformed -otlp-endpoint turns tracing off with a warning:
// traces are never a reason for a worker not to work.
func (t *traceFlags) start(logger *slog.Logger, instance string) tracing {
	var opts []otlptracehttp.Option
	where := ""
	switch {
	case spanExporter != nil:
		return t.withExporter(logger, instance, spanExporter(), "(test)")
	case t.endpoint != "":
		u, err := traceEndpoint(t.endpoint)
		if err != nil {
			logger.Warn("tracing off", "err", err)
			return tracing{}
		}
		opts, where = append(opts, otlptracehttp.WithEndpointURL(u)), u
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		where = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		where = baseEndpoint(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	default:
		return tracing{}
	}
	// Give up on a batch within seconds: the batcher drops what does not
	// fit its queue meanwhile, so a collector that is down costs spans,
	// never the work's time.
	opts = append(opts, otlptracehttp.WithTimeout(5*time.Second),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: time.Second,
			MaxInterval: 5 * time.Second, MaxElapsedTime: 15 * time.Second}))
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		logger.Warn("tracing off", "err", err)
		return tracing{}
	}
	otel.SetErrorHandler(newExportWarnings(logger, time.Minute))
	return t.withExporter(logger, instance, exp, where)
}

// spanExporter, if set (by tests), is every command's exporter, in place
// of OTLP's: tracing is on with or without an endpoint.
var spanExporter func() sdktrace.SpanExporter

// withExporter is the TracerProvider that batches its spans to exp.
func (t *traceFlags) withExporter(logger *slog.Logger, instance string, exp sdktrace.SpanExporter, where string) tracing {
	popts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(t.resource(logger, instance))}
	s, desc, err := t.sampler()
	if err != nil { // the commands refuse it before (check): a caller that did not
		logger.Warn("traces: sampling 1% of new traces", "err", err)
		s, desc = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(defaultTraceSample)), "parent-based, 1% of new traces"
	}
	popts = append(popts, sdktrace.WithSampler(s))
	logger.Info("tracing on", "otlp_endpoint", where, "sampler", desc)
	return tracing{tp: sdktrace.NewTracerProvider(popts...)}
}

// traceEndpoint is -otlp-endpoint as the exporter's URL: a scheme
// (http:// unless given) and the traces' path, /v1/traces, unless the URL
// ends with it.
func traceEndpoint(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("-otlp-endpoint %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("-otlp-endpoint %q: want http(s)://host:port, e.g. http://localhost:4318", s)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimRight(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// baseEndpoint is the URL the exporter sends to for a base URL given as
// $OTEL_EXPORTER_OTLP_ENDPOINT: the SDK joins /v1/traces to its path.
func baseEndpoint(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	u.Path = path.Join(u.Path, "/v1/traces")
	return u.String()
}

// sampler is the sampler of new traces and its description for the log:
// parent-based, a ratio of -trace-sample when given (as a flag or its
// variable); else the one $OTEL_TRACES_SAMPLER names, with
// $OTEL_TRACES_SAMPLER_ARG as the SDK reads them; else parent-based, a
// ratio of $OTEL_TRACES_SAMPLER_ARG if set, of 1% if not. A variable it
// cannot use is an error naming it, whether the flag overrides it or not.
func (t *traceFlags) sampler() (sdktrace.Sampler, string, error) {
	given := false
	if t.fs != nil {
		t.fs.Visit(func(f *flag.Flag) { given = given || f.Name == "trace-sample" })
	}
	name, arg := os.Getenv("OTEL_TRACES_SAMPLER"), os.Getenv("OTEL_TRACES_SAMPLER_ARG")
	var fromEnv sdktrace.Sampler
	var desc string
	if name != "" {
		var err error
		if fromEnv, desc, err = envSampler(name, arg); err != nil {
			return nil, "", err
		}
	}
	ratio := t.sample
	switch {
	case given:
	case fromEnv != nil:
		return fromEnv, desc, nil
	case arg != "":
		var err error
		if ratio, err = samplerArg(arg); err != nil {
			return nil, "", err
		}
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), "parent-based, " + share(ratio, "new traces"), nil
}

// envSampler is the sampler $OTEL_TRACES_SAMPLER names, as the
// OpenTelemetry SDK builds it (a ratio of 1 when the argument is empty).
func envSampler(name, arg string) (sdktrace.Sampler, string, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		return samplerArg(arg)
	}
	desc := "$OTEL_TRACES_SAMPLER=" + name
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), desc + ": all traces", nil
	case "always_off":
		return sdktrace.NeverSample(), desc + ": no traces", nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), desc + ": parent-based, all new traces", nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), desc + ": parent-based, no new traces", nil
	case "traceidratio":
		r, err := ratio()
		return sdktrace.TraceIDRatioBased(r), desc + ": " + share(r, "traces") + ", ignoring the producer's decision", err
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), desc + ": parent-based, " + share(r, "new traces"), err
	}
	return nil, "", fmt.Errorf("$OTEL_TRACES_SAMPLER=%q: not a sampler this command knows; want always_on, always_off, "+
		"traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio (or unset it and give -trace-sample)", name)
}

// samplerArg reads $OTEL_TRACES_SAMPLER_ARG as a ratio.
func samplerArg(arg string) (float64, error) {
	v, err := strconv.ParseFloat(arg, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return 0, fmt.Errorf("$OTEL_TRACES_SAMPLER_ARG=%q: want a share from 0 to 1 (0.01: one trace in a hundred)", arg)
	}
	return v, nil
}

// share says a ratio of what for people: "all new traces", "no new
// traces", "1% of new traces".
func share(r float64, what string) string {
	switch r {
	case 1:
		return "all " + what
	case 0:
		return "no " + what
	}
	return fmt.Sprintf("%.4g%% of %s", r*100, what)
}

// resource says which process the spans come from: service.name (the
// command's, unless $OTEL_SERVICE_NAME or $OTEL_RESOURCE_ATTRIBUTES name
// another), service.instance.id (instance, else the host's name) and
// service.version (the module's, when the binary was built from a
// release).
func (t *traceFlags) resource(logger *slog.Logger, instance string) *resource.Resource {
	if instance == "" {
		instance, _ = os.Hostname()
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", t.service)}
	if instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", instance))
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		attrs = append(attrs, attribute.String("service.version", bi.Main.Version))
	}
	// The variables' attributes win over the defaults (a later detector's
	// value replaces an earlier one's).
	r, err := resource.New(context.Background(), resource.WithAttributes(attrs...), resource.WithFromEnv(),
		resource.WithTelemetrySDK())
	if err != nil { // a malformed $OTEL_RESOURCE_ATTRIBUTES: what parsed is kept
		logger.Warn("traces: resource attributes", "err", err)
	}
	if r == nil {
		r = resource.NewSchemaless(attrs...)
	}
	return r
}

// exportWarnings logs the exporter's errors as warnings, the first one at
// once and then at most one an interval, with the number left unsaid.
type exportWarnings struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	quiet int
}

func newExportWarnings(log *slog.Logger, every time.Duration) *exportWarnings {
	return &exportWarnings{log: log, every: every}
}

// Handle is otel.ErrorHandler's.
func (w *exportWarnings) Handle(err error) {
	w.mu.Lock()
	now := time.Now()
	if !w.last.IsZero() && now.Sub(w.last) < w.every {
		w.quiet++
		w.mu.Unlock()
		return
	}
	quiet := w.quiet
	w.last, w.quiet = now, 0
	w.mu.Unlock()
	w.log.Warn("traces: the exporter failed; spans it could not send are dropped", "err", err, "errors_since_last_warning", quiet)
}

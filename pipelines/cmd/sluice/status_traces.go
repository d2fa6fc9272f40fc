package main

import (
	"context"
	"encoding/json"
	"html/template"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-streams/sluice/stream/observe"
)

// slowWindow is how recent an exemplar must be to count on
// /status/traces: a bucket keeps its last exemplar for good, and an old
// one says nothing of now.
const slowWindow = 5 * time.Minute

// slowCall is a stage's slowest recent call that was traced: the highest
// bucket of its latency histogram with an exemplar of the last
// slowWindow.
type slowCall struct {
	Pipeline string    `json:"pipeline"`
	Stage    string    `json:"stage"`
	Seconds  float64   `json:"seconds"`
	At       time.Time `json:"at"`
	TraceID  string    `json:"trace_id"`
	Link     string    `json:"link,omitempty"`
}

// slowHistograms are the histograms whose exemplars /status/traces reads:
// the calls of each asynchronous stage, and the pipeline's end to end.
var slowHistograms = map[string]string{"sluice_async_call_seconds": "", "sluice_end_to_end_latency_seconds": "end to end"}

// slowestCalls reads, from g's histograms, each stage's slowest traced
// call since now-within; link, if not empty, makes each trace id a link
// ({trace_id} replaced).
func slowestCalls(g prometheus.Gatherer, now time.Time, within time.Duration, link string) ([]slowCall, error) {
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, err
	}
	var out []slowCall
	for _, mf := range mfs {
		stageName, ok := slowHistograms[mf.GetName()]
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			c := slowCall{Stage: stageName}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "pipeline":
					c.Pipeline = l.GetValue()
				case "stage":
					c.Stage = l.GetValue()
				}
			}
			if slowest(m.GetHistogram(), now.Add(-within), &c) {
				if link != "" {
					c.Link = strings.ReplaceAll(link, "{trace_id}", c.TraceID)
				}
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b slowCall) int {
		if a.Pipeline != b.Pipeline {
			return strings.Compare(a.Pipeline, b.Pipeline)
		}
		return strings.Compare(a.Stage, b.Stage)
	})
	return out, nil
}

// slowest sets c to h's largest exemplar stamped at since or later;
// false if it has none.
func slowest(h *dto.Histogram, since time.Time, c *slowCall) bool {
	found := false
	for _, e := range exemplars(h) {
		at := e.GetTimestamp().AsTime()
		if e.GetTimestamp() == nil || at.Before(since) || (found && e.GetValue() <= c.Seconds) {
			continue
		}
		for _, l := range e.GetLabel() {
			if l.GetName() == "trace_id" && l.GetValue() != "" {
				c.Seconds, c.At, c.TraceID, found = e.GetValue(), at, l.GetValue(), true
			}
		}
	}
	return found
}

// exemplars are h's exemplars: its buckets', and its own (native
// histograms).
func exemplars(h *dto.Histogram) []*dto.Exemplar {
	out := slices.Clone(h.GetExemplars())
	for _, b := range h.GetBucket() {
		if e := b.GetExemplar(); e != nil {
			out = append(out, e)
		}
	}
	return out
}

var slowPage = template.Must(template.New("traces").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>sluice: slowest traced calls</title>
<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em 1em;text-align:left}td.n{text-align:right}</style></head>
<body><h1>Slowest traced call of each stage, last {{.Window}}</h1>
{{if not .Calls}}<p>None yet: tracing is off (-otlp-endpoint), or no sampled request went through since.</p>{{else}}
<table><tr><th>pipeline</th><th>stage</th><th>seconds</th><th>at</th><th>trace</th></tr>
{{range .Calls}}<tr><td>{{.Pipeline}}</td><td>{{.Stage}}</td><td class="n">{{printf "%.4f" .Seconds}}</td><td>{{.At.UTC.Format "2006-01-02 15:04:05 MST"}}</td>
<td>{{if .Link}}<a href="{{.Link}}">{{.TraceID}}</a>{{else}}<code>{{.TraceID}}</code>{{end}}</td></tr>
{{end}}</table>{{end}}
<p><a href="/status">/status</a> · <a href="/status/traces.json">as JSON</a></p></body></html>
`))

// slowHandler serves /status/traces (a page) and /status/traces.json.
func slowHandler(g prometheus.Gatherer, link string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status/traces", func(w http.ResponseWriter, _ *http.Request) {
		calls, err := slowestCalls(g, time.Now(), slowWindow, link)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = slowPage.Execute(w, struct {
			Window time.Duration
			Calls  []slowCall
		}{slowWindow, calls})
	})
	mux.HandleFunc("/status/traces.json", func(w http.ResponseWriter, _ *http.Request) {
		calls, err := slowestCalls(g, time.Now(), slowWindow, link)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Calls []slowCall `json:"calls"`
		}{calls})
	})
	return mux
}

// serveWorker serves the worker's endpoints (observe.Handler) and
// /status/traces on ln until ctx ends, as observe.Serve does; a traced
// worker's /status links to /status/traces.
func serveWorker(ctx context.Context, ln net.Listener, cfg observe.ServerConfig, traceURL string, traced bool) (addr string, done <-chan error) {
	cfg.Context = ctx
	mux := http.NewServeMux()
	obs := observe.Handler(cfg)
	mux.Handle("/", obs)
	if traced {
		mux.Handle("/status", linkTraces(obs))
	}
	slow := slowHandler(cfg.Gatherer, traceURL)
	mux.Handle("/status/traces", slow)
	mux.Handle("/status/traces.json", slow)
	return observe.ServeHandler(ctx, ln, mux)
}

// tracesLink goes under the heading of the /status page.
const tracesLink = `<h1>sluice</h1>
<p><a href="/status/traces">Slowest traced calls</a></p>`

// linkTraces serves h's /status page with a link to /status/traces under
// its heading (the page is a fixed one, its numbers fetched by script).
func linkTraces(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := &pageWriter{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(page, r)
		for k, v := range page.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(page.code)
		_, _ = io.WriteString(w, strings.Replace(page.body.String(), "<h1>sluice</h1>", tracesLink, 1))
	})
}

// pageWriter keeps a page to be changed before it is sent.
type pageWriter struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (p *pageWriter) Header() http.Header         { return p.header }
func (p *pageWriter) WriteHeader(code int)        { p.code = code }
func (p *pageWriter) Write(b []byte) (int, error) { return p.body.Write(b) }

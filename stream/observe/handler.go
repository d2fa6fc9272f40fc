package observe

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-streams/sluice/stream"
)

//go:embed status.html
var statusPage []byte

// assets are the page's script and styles (uPlot, see assets/uplot/README.md),
// served from the binary so that the page works offline.
//
//go:embed assets
var assets embed.FS

// ServerConfig configures the HTTP endpoints a worker serves.
type ServerConfig struct {
	// Addr to listen on (default 127.0.0.1:9464: loopback only; bind a
	// public address on purpose).
	Addr string
	// Listener, if set, is served instead of listening on Addr: a worker
	// listens before it joins its consumer group, so that a taken address
	// stops it before it holds partitions.
	Listener net.Listener
	// Gatherer serves /metrics (usually the *prometheus.Registry the
	// Metrics were registered on).
	Gatherer prometheus.Gatherer
	// Graphs are drawn on /status and listed in /status.json.
	Graphs []*stream.Graph
	// GraphsFunc, if set, is asked for the graphs instead of Graphs at
	// each request and history sample: for a process whose pipelines
	// come and go (instances stopped and started). Each graph needs a
	// name of its own; one no longer returned leaves /status,
	// /status.json and /history.json, and its history is dropped once
	// the window passed.
	GraphsFunc func() []*stream.Graph
	// Metrics, if given, add each pipeline's numbers by level of priority
	// (Metrics.Levels) to /status and /status.json, matched to Graphs by
	// pipeline name.
	Metrics []*Metrics
	// Ready answers /readyz: nil means ready (for a Kafka worker, the
	// source's Ready: partitions assigned, broker reachable). Nil Ready:
	// always ready.
	Ready func(ctx context.Context) error
	// Pprof mounts net/http/pprof under /debug/pprof/ (default off).
	Pprof bool
	// OpenMetrics serves /metrics in the OpenMetrics format to a scraper
	// that asks for it, so that it gets the histograms' exemplars (the
	// trace ids of sampled observations, in a traced pipeline). Default
	// off: the Prometheus text format only. Every Prometheus server asks
	// for OpenMetrics first when it is offered, and OpenMetrics writes a
	// whole-number bucket bound as le="1.0" where the text format writes
	// le="1": Prometheus 2 stores them as new series, so the rate() and
	// histogram_quantile() of a dashboard break across the change
	// (Prometheus 3 stores le="1.0" from either format).
	OpenMetrics bool
	// Context, if set, bounds the sampling of the history (/history.json):
	// a sample every HistoryInterval until it ends. Without it the history
	// is sampled only when /status.json or /history.json is asked for (no
	// goroutine is started). Serve sets it to its own context.
	Context context.Context
	// HistoryInterval and HistoryWindow: a sample every HistoryInterval
	// (default 2 s), the last HistoryWindow kept (default 15 minutes).
	HistoryInterval, HistoryWindow time.Duration
}

// Handler returns the worker's endpoints: /metrics, /healthz (the process
// answers), /readyz, /status (a live page of the pipelines with charts of
// their recent history), /status.json (the numbers now), /history.json
// (the recent history) and, with Pprof, /debug/pprof/.
func Handler(cfg ServerConfig) http.Handler {
	mux := http.NewServeMux()
	hist := NewHistory(cfg.Graphs, cfg.Metrics, cfg.HistoryInterval, cfg.HistoryWindow)
	hist.current = cfg.GraphsFunc
	sample := func() {}
	if cfg.Context != nil {
		go hist.Run(cfg.Context.Done())
	} else {
		var mu sync.Mutex
		var last time.Time
		sample = func() {
			mu.Lock()
			defer mu.Unlock()
			if now := time.Now(); now.Sub(last) >= hist.Interval() {
				hist.Sample(now)
				last = now
			}
		}
	}
	if cfg.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{EnableOpenMetrics: cfg.OpenMetrics}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if cfg.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := cfg.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(statusPage)
	})
	mux.HandleFunc("/status.json", func(w http.ResponseWriter, _ *http.Request) {
		sample()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(snapshot(hist.pipelines(), cfg.Metrics, hist))
	})
	mux.HandleFunc("/history.json", func(w http.ResponseWriter, _ *http.Request) {
		sample()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(hist.Snapshot())
	})
	mux.Handle("/assets/", http.FileServerFS(assets))
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Status is what /status.json returns.
type Status struct {
	Time      time.Time        `json:"time"`
	Pipelines []PipelineStatus `json:"pipelines"`
}

// PipelineStatus is one pipeline's stages, in the order they were added.
type PipelineStatus struct {
	Name   string        `json:"name"`
	Stages []StageStatus `json:"stages"`
	// Levels lists the numbers by level of priority (ServerConfig.Metrics).
	Levels []LevelStatus `json:"levels,omitempty"`
}

// StageStatus is one stage's counters.
type StageStatus struct {
	Name     string  `json:"name"`
	In       int64   `json:"in"`
	Out      int64   `json:"out"`
	Settled  int64   `json:"settled"`
	Failed   int64   `json:"failed"`
	InFlight int64   `json:"in_flight"`
	Buffered int64   `json:"buffered"`
	Capacity int64   `json:"capacity"`
	Blocked  float64 `json:"blocked_seconds"`
	// Rate is the stage's throughput over the last interval of the
	// history: the messages it handled (handed on, settled or failed) per
	// second; absent until two samples were taken.
	Rate *float64 `json:"rate,omitempty"`
	// FailurePath: the stage handles what other stages failed.
	FailurePath bool `json:"failure_path,omitempty"`
	// Inputs names the stages whose output the stage reads (several where
	// streams merge; none for a source).
	Inputs []string `json:"inputs,omitempty"`
}

func snapshot(gs []*stream.Graph, ms []*Metrics, h *History) Status {
	st := Status{Time: time.Now()}
	for _, g := range gs {
		p := PipelineStatus{Name: g.Name()}
		for _, s := range g.Stats() {
			ss := StageStatus{Name: s.Name, In: s.In, Out: s.Out, Settled: s.Settled, Failed: s.Failed,
				InFlight: s.InFlight(), Buffered: s.Buffered, Capacity: s.Capacity, Blocked: s.Blocked.Seconds(),
				FailurePath: s.FailurePath, Inputs: s.Inputs}
			if r, ok := h.throughput(g.Name(), s.Name); ok {
				ss.Rate = &r
			}
			p.Stages = append(p.Stages, ss)
		}
		for _, m := range ms {
			if m != nil && m.pipeline == g.Name() {
				p.Levels = append(p.Levels, m.Levels()...)
			}
		}
		st.Pipelines = append(st.Pipelines, p)
	}
	return st
}

// Serve serves Handler(cfg) until ctx is cancelled, then shuts down within
// five seconds. It returns at once: the address it listens on, or the
// error of a failed listen; done receives the server's error (nil after a
// clean shutdown) once the listener is closed.
func Serve(ctx context.Context, cfg ServerConfig) (addr string, done <-chan error, err error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:9464"
	}
	if cfg.Context == nil {
		cfg.Context = ctx
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return "", nil, err
		}
	}
	addr, done = ServeHandler(ctx, ln, Handler(cfg))
	return addr, done, nil
}

// ServeHandler serves h on ln as Serve does: until ctx is cancelled, then
// shuts down within five seconds; done receives the server's error (nil
// after a clean shutdown) once the listener is closed. For a program that
// serves Handler beside endpoints of its own.
func ServeHandler(ctx context.Context, ln net.Listener, h http.Handler) (addr string, done <-chan error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ch := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		ch <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), ch
}

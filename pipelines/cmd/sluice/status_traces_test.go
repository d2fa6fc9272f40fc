package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/stream/observe"
)

// A traced worker's /status links to /status/traces, an untraced one's
// does not; /status/traces says the zone of its times.
func TestTraceStatusPageLinksAndZone(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_async_call_seconds", Help: "calls"}, []string{"pipeline", "stage"})
	reg.MustRegister(h)
	h.WithLabelValues("deliveries", "check_account").(prometheus.ExemplarObserver).ObserveWithExemplar(0.2,
		prometheus.Labels{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
	get := func(addr, path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, traced := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		addr, done := serveWorker(ctx, ln, observe.ServerConfig{Gatherer: reg}, "", traced)
		status := get(addr, "/status")
		if linked := strings.Contains(status, `href="/status/traces"`); linked != traced || !strings.Contains(status, "<h1>") {
			t.Errorf("traced %v: /status links to /status/traces: %v", traced, linked)
		}
		if traced {
			if page := get(addr, "/status/traces"); !strings.Contains(page, " UTC</td>") {
				t.Errorf("/status/traces shows no zone:\n%s", page)
			}
		}
		cancel()
		<-done
	}
}

// The banner of `sluice up` names a worker's /status/traces when the
// workers trace.
func TestTraceUpBannerNamesStatusTraces(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, otlp := range []string{"localhost:4318", ""} {
		r := &upRun{c: &upConfig{otlp: otlp, self: "sluice", dir: t.TempDir()}}
		p := r.worker("delivery", "127.0.0.1:9466")
		if named := strings.Contains(p.about, "http://127.0.0.1:9466/status/traces"); named != (otlp != "") {
			t.Errorf("-otlp-endpoint %q: the banner says %q", otlp, p.about)
		}
	}
}

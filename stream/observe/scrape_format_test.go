package observe_test

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-streams/sluice/stream/observe"
)

// prometheusAccept is the Accept header a Prometheus server sends when
// scrape_protocols is not set: it asks for OpenMetrics first, with or
// without --enable-feature=exemplar-storage.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// A Prometheus server asks for OpenMetrics first by default, with or
// without --enable-feature=exemplar-storage. The series it stores must be
// those it stored from the text format, traced pipeline or not: a
// histogram bucket whose bound is a whole number is le="1" in the text
// format and le="1.0" in OpenMetrics, a different series to a Prometheus 2
// server, which would split every sluice_async_attempts bucket at the
// upgrade (and the Redis read and write histograms' 1, 2.5... buckets),
// breaking the rate() and histogram_quantile() of the shipped dashboard
// across it. So /metrics offers OpenMetrics only when told to
// (ServerConfig.OpenMetrics: TestExemplarsOnMetrics), and by default
// answers Prometheus's Accept with the text format.
func TestScrapeFormatsGiveTheSameSeries(t *testing.T) {
	reg := runOneMessage(t, "plain", 0, nil)
	srv := newServer(t, observe.ServerConfig{Gatherer: reg})
	text, ct := scrapeWith(t, srv, "text/plain;version=0.0.4")
	if !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("a text scrape answered %q", ct)
	}
	if !strings.Contains(text, `sluice_async_attempts_bucket{pipeline="plain",stage="map-async",le="1"}`) {
		t.Fatalf("no whole-number bucket bound to compare:\n%s", grepLines(text, "sluice_async_attempts_bucket"))
	}
	prom, ct := scrapeWith(t, srv, prometheusAccept)
	if !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Prometheus's default Accept got %q, not the text format", ct)
	}
	a, b := seriesOf(text), seriesOf(prom)
	var onlyText, onlyProm []string
	for s := range a {
		if !b[s] {
			onlyText = append(onlyText, s)
		}
	}
	for s := range b {
		if !a[s] {
			onlyProm = append(onlyProm, s)
		}
	}
	sort.Strings(onlyText)
	sort.Strings(onlyProm)
	if len(onlyText)+len(onlyProm) > 0 {
		t.Errorf("Prometheus's default Accept got %q; %d series of the text format are not in it, e.g. %v; it has instead e.g. %v",
			ct, len(onlyText), first(onlyText, 3), first(onlyProm, 3))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func scrapeWith(t *testing.T, srv, accept string) (body, contentType string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv+"/metrics", nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.Header.Get("Content-Type")
}

// seriesOf returns the series of an exposition, name and labels, without
// values, timestamps or exemplars.
func seriesOf(body string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, "}"); i >= 0 {
			l = l[:i+1]
		} else if i := strings.IndexByte(l, ' '); i >= 0 {
			l = l[:i]
		}
		out[l] = true
	}
	return out
}

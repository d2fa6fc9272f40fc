package dashboards

import (
	"reflect"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sluice_kafka_lag`: {"sluice_kafka_lag"},
		`sluice_kafka_lag{topic="a",partition=~"1|2"} > 0`: {"sluice_kafka_lag"},
		`sum by (pipeline, stage) (rate(sluice_retries_total{reason!="other"}[5m]))
		  / on (pipeline, stage) group_left sum by (pipeline, stage) (rate(sluice_async_calls_total[5m])) > 0.05`: {
			"sluice_async_calls_total", "sluice_retries_total"},
		`histogram_quantile(0.99, sum by (le) (rate(sluice_end_to_end_latency_seconds_bucket{pipeline=~"$pipeline"}[$__rate_interval])))`: {
			"sluice_end_to_end_latency_seconds_bucket"},
		`sum(rate(a_total[5m])) without (instance) or vector(0)`:                {"a_total"},
		`SUM BY (x) (b) AND ON() c OFFSET 5m unless d @ start()`:                {"b", "c", "d"},
		`deriv(sluice_kafka_lag[15m:1m]) > 0 and sluice_kafka_lag > 1e4`:        {"sluice_kafka_lag"},
		`label_replace(up{job="sluice"}, "dst", "$1", "src", "(.*)") == bool 0`: {"up"},
		`count_values("state", x) # a comment naming not_a_metric`:              {"x"},
		`max_over_time(job:lag:max5m[1h]) * -Inf + NaN`:                         {"job:lag:max5m"},
		`topk(5, sum by (stage) (sluice_stage_buffered{pipeline="${pipeline}"} / sluice_stage_buffer_capacity))`: {
			"sluice_stage_buffer_capacity", "sluice_stage_buffered"},
		`increase(x{l="a}b"}[1h] offset 1d)`: {"x"},
	} {
		got, err := MetricNames(expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", expr, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("MetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

func TestMetricNamesRefusesWhatItCannotCheck(t *testing.T) {
	for expr, want := range map[string]string{
		`{__name__=~"sluice_.*"}`:  "__name__",
		`rate({job="sluice"}[5m])`: "no metric name",
		`sum(rate(x[5m])`:          "unclosed",
		`x{a="b}`:                  "unterminated",
		`x]`:                       "unbalanced",
	} {
		_, err := MetricNames(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("MetricNames(%q): error %v, want one saying %q", expr, err, want)
		}
	}
}

func TestCatalogKnowsAHistogramBySeries(t *testing.T) {
	c := Catalog{"h_seconds": "histogram", "s": "summary", "c_total": "counter", "g": "gauge"}
	for _, name := range []string{"h_seconds", "h_seconds_bucket", "h_seconds_sum", "h_seconds_count", "s_sum", "s_count", "c_total", "g"} {
		if !c.Has(name) {
			t.Errorf("Has(%q) = false", name)
		}
	}
	got := c.Missing([]string{"g", "g_bucket", "s_bucket", "c_total_count", "c_totl", "c_totl"})
	if want := []string{"c_total_count", "c_totl", "g_bucket", "s_bucket"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Missing = %q, want %q", got, want)
	}
}

func TestDocumentedReadsTheTables(t *testing.T) {
	md := "# m\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n" +
		"| `sluice_a_total` | counter | stage | things |\n" +
		"| `sluice_b_total` / `sluice_c_total` | counter | stage | ok / failed |\n" +
		"| `sluice_d_seconds` | histogram | — | time |\n" +
		"| `priority` | label | — | not a metric |\n" +
		"Text naming `sluice_e` outside a table.\n"
	want := Catalog{"sluice_a_total": "counter", "sluice_b_total": "counter", "sluice_c_total": "counter", "sluice_d_seconds": "histogram"}
	if got := Documented(md); !reflect.DeepEqual(got, want) {
		t.Errorf("Documented = %v, want %v", got, want)
	}
}

package dashboards

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-streams/sluice/internal/doclinks"
)

// TestDashboardImports checks what Grafana needs to import the dashboard
// anywhere: a data source variable every query uses, job and instance
// variables, a query in every panel, ids unique.
func TestDashboardImports(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q, uid %q, schemaVersion %d: want a title, a uid and schemaVersion 36 or later", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query", "pipeline": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	ids := map[int]string{}
	var check func(ps []panel)
	check = func(ps []panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok || p.ID == 0 {
				t.Errorf("panel %q: id %d already %q (or zero)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil {
				t.Errorf("panel %d %q has no gridPos", p.ID, p.Title)
			}
			if p.Type == "row" {
				check(p.Panels)
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d %q: want a title and a query", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				ds := tg.Datasource
				if ds == nil {
					ds = p.Datasource
				}
				if strings.TrimSpace(tg.Expr) == "" || ds == nil || ds.UID != "${datasource}" {
					t.Errorf("panel %d %q query %s: expr %q, data source %+v; want an expr on ${datasource}", p.ID, p.Title, tg.RefID, tg.Expr, ds)
				}
			}
		}
	}
	check(d.Panels)
	if len(allPanels(d.Panels)) < 20 {
		t.Errorf("only %d panels", len(allPanels(d.Panels)))
	}
}

// TestAlertRulesAreComplete checks each rule as Prometheus loads it and
// as an operator reads it: an alert with an expression, a for, a
// severity, and a summary, a description and a runbook link to its
// section of the docs.
func TestAlertRulesAreComplete(t *testing.T) {
	f := loadRules(t)
	page, err := os.ReadFile(alertsPage)
	if err != nil {
		t.Fatal(err)
	}
	anchors := doclinks.Anchors(string(page))
	const runbook = "https://github.com/sluice-streams/sluice/blob/main/docs/observability.md#"
	seen := map[string]bool{}
	n := 0
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("rule %q: want an alert name, once", r.Alert)
			}
			seen[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", r.Alert)
			}
			if _, err := parseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbook)
			if !ok || !anchors[anchor] || anchor != doclinks.Slug(r.Alert) {
				t.Errorf("%s: runbook_url %q, want %s%s, a heading of %s", r.Alert, r.Annotations["runbook_url"], runbook,
					doclinks.Slug(r.Alert), alertsPage)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d rules", n)
	}
}

// TestAlertUnitTestsNameShippedAlerts: the unit tests of the rules (run
// by promtool test rules, which the operator has and this module does
// not) load alerts.yml and test alerts it has, so that renaming an alert
// cannot leave its tests testing nothing.
func TestAlertUnitTestsNameShippedAlerts(t *testing.T) {
	b, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertTests, err)
	}
	if len(f.RuleFiles) != 1 || f.RuleFiles[0] != filepath.Base(alertsFile) {
		t.Errorf("%s loads %q, want [%s]", alertTests, f.RuleFiles, filepath.Base(alertsFile))
	}
	shipped := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			shipped[r.Alert] = true
		}
	}
	tested := map[string]bool{}
	doc := documented(t)
	for i, tc := range f.Tests {
		for _, in := range tc.InputSeries {
			for _, err := range Check([]Query{{Where: fmt.Sprintf("%s test %d", alertTests, i+1), Expr: in.Series}}, doc) {
				t.Error(err)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if !shipped[a.Alertname] {
				t.Errorf("%s tests %q, not an alert of %s", alertTests, a.Alertname, alertsFile)
			}
			tested[a.Alertname] = true
		}
	}
	if len(tested) < 10 {
		t.Errorf("%s tests only %d alerts", alertTests, len(tested))
	}
}

// parseDuration reads a Prometheus duration (1m, 1h30m, 0m): Go's, with
// d and w added.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("missing")
	}
	m := regexp.MustCompile(`^(\d+)([dw])(.*)$`).FindStringSubmatch(s)
	if m == nil {
		return time.ParseDuration(s)
	}
	var n int
	fmt.Sscan(m[1], &n)
	day := 24 * time.Hour
	d := time.Duration(n) * day
	if m[2] == "w" {
		d *= 7
	}
	if m[3] == "" {
		return d, nil
	}
	rest, err := time.ParseDuration(m[3])
	return d + rest, err
}

// shippedQueries returns every query of the dashboard, the rules and the
// metrics page's examples.
func shippedQueries(t *testing.T) []Query {
	t.Helper()
	qs := dashboardQueries(loadDashboard(t))
	qs = append(qs, ruleQueries(loadRules(t))...)
	qs = append(qs, pageQueries(t, metricsPage)...)
	if len(qs) < 50 {
		t.Fatalf("found only %d queries", len(qs))
	}
	return qs
}

func documented(t *testing.T) Catalog {
	t.Helper()
	b, err := os.ReadFile(metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	c := Documented(string(b))
	if len(c) < 50 {
		t.Fatalf("%s documents only %d metrics", metricsPage, len(c))
	}
	return c
}

// TestQueriesReadDocumentedMetrics: every metric a shipped query reads is
// in the reference, docs/metrics.md.
func TestQueriesReadDocumentedMetrics(t *testing.T) {
	for _, err := range Check(shippedQueries(t), documented(t)) {
		t.Error(err)
	}
}

// TestQueriesReadServedMetrics: every metric a shipped query reads is
// served on the /metrics of running pipelines, as documented (the name
// and the kind), but those Prometheus makes itself.
func TestQueriesReadServedMetrics(t *testing.T) {
	qs := shippedQueries(t)
	names, err := Names(qs)
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, n := range names {
		if !madeByPrometheus[n] {
			served = append(served, n)
		}
	}
	live := scrapeLive(t, served)
	for n := range madeByPrometheus {
		live[n] = "gauge"
	}
	for _, err := range Check(qs, live) {
		t.Error(err)
	}
	doc := documented(t)
	for _, n := range served {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && live[b] == "histogram" {
				base = b
			}
		}
		if k, ok := live[base]; ok && doc[base] != k {
			t.Errorf("%s is served as a %s, documented as a %q", base, k, doc[base])
		}
	}
}

// TestCheckFindsAMisspelledMetric feeds the checker the shipped queries
// with one name misspelled, in a panel and in a rule: each is reported,
// with where it is.
func TestCheckFindsAMisspelledMetric(t *testing.T) {
	d := loadDashboard(t)
	f := loadRules(t)
	doc := documented(t)
	qs := dashboardQueries(d)
	qs[len(qs)/2].Expr = strings.Replace(qs[len(qs)/2].Expr, "sluice_", "sluice_stgae_", 1)
	rq := ruleQueries(f)
	rq[0].Expr = `rate(sluice_kafka_commit_erors_total[5m]) > 0`
	errs := Check(append(qs, rq...), doc)
	var msgs []string
	for _, err := range errs {
		msgs = append(msgs, err.Error())
	}
	got := strings.Join(msgs, "\n")
	if len(errs) != 2 || !strings.Contains(got, qs[len(qs)/2].Where+": no metric sluice_stgae_") ||
		!strings.Contains(got, "alert "+f.Groups[0].Rules[0].Alert+": no metric sluice_kafka_commit_erors_total") {
		t.Errorf("Check found:\n%s\nwant the misspelled panel query and rule, each once", got)
	}
	// And the histogram's series stand for it only while it is one.
	if errs := Check([]Query{{"q", `sluice_kafka_lag_bucket`}}, doc); len(errs) != 1 {
		t.Errorf("a gauge's _bucket: %v, want an error", errs)
	}
}

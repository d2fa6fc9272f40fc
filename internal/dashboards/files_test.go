package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const root = "../.."

var (
	dashboardFile = filepath.Join(root, "docs", "grafana", "sluice.json")
	alertsFile    = filepath.Join(root, "docs", "prometheus", "alerts.yml")
	alertTests    = filepath.Join(root, "docs", "prometheus", "alerts_test.yml")
	metricsPage   = filepath.Join(root, "docs", "metrics.md")
	alertsPage    = filepath.Join(root, "docs", "observability.md")
)

// madeByPrometheus are the series Prometheus writes itself for every
// target it scrapes: a rule may read them, no worker serves them.
var madeByPrometheus = map[string]bool{"up": true}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource *datasource      `json:"datasource"`
	GridPos    *json.RawMessage `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// query returns a query variable's PromQL (written as a string, or as an
// object with a query field).
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelled key (expresion:, anotations:) is an error, as in Prometheus
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return f
}

// allPanels returns the dashboard's panels, those of collapsed rows
// included, rows excluded.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, allPanels(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// dashboardQueries returns every PromQL query of the dashboard: its
// panels' and its variables' (label_values(selector, label) read as its
// selector).
func dashboardQueries(d dashboard) []Query {
	var qs []Query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, Query{Where: fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, tg.RefID), Expr: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.query()
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		qs = append(qs, Query{Where: fmt.Sprintf("variable %s", v.Name), Expr: q})
	}
	return qs
}

func ruleQueries(f ruleFile) []Query {
	var qs []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			qs = append(qs, Query{Where: fmt.Sprintf("alert %s", r.Alert), Expr: r.Expr})
		}
	}
	return qs
}

var (
	promqlBlock = regexp.MustCompile("(?s)```promql\n(.*?)```")
	yamlBlock   = regexp.MustCompile("(?s)```yaml\n(.*?)```")
)

// pageQueries returns the PromQL of a Markdown page: its promql blocks,
// and the expr of the rules in its yaml blocks.
func pageQueries(t *testing.T, name string) []Query {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var qs []Query
	for i, m := range promqlBlock.FindAllStringSubmatch(string(b), -1) {
		for j, expr := range splitPromQL(m[1]) {
			qs = append(qs, Query{Where: fmt.Sprintf("%s promql block %d, query %d", filepath.Base(name), i+1, j+1), Expr: expr})
		}
	}
	for i, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
		var f ruleFile
		if err := yaml.Unmarshal([]byte(m[1]), &f); err != nil || len(f.Groups) == 0 {
			continue // not rules
		}
		for _, q := range ruleQueries(f) {
			q.Where = fmt.Sprintf("%s yaml block %d, %s", filepath.Base(name), i+1, q.Where)
			qs = append(qs, q)
		}
	}
	return qs
}

// splitPromQL splits a promql block into its queries: separated by a
// comment line or a blank line.
func splitPromQL(block string) []string {
	var out []string
	var cur []string
	flush := func() {
		if q := strings.TrimSpace(strings.Join(cur, "\n")); q != "" {
			out = append(out, q)
		}
		cur = nil
	}
	for _, line := range strings.Split(block, "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return out
}

package dashboards

import (
	"bufio"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Kind is a metric's type as Prometheus names it: counter, gauge,
// histogram, summary (or untyped).
type Kind string

// Catalog is a set of metric families: base name to kind. A histogram is
// listed once, under its base name.
type Catalog map[string]Kind

// Has reports whether name is one of the catalog's series names: a family,
// or a histogram's _bucket, _sum or _count series (a summary's _sum or
// _count).
func (c Catalog) Has(name string) bool {
	if _, ok := c[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch c[base] {
		case "histogram":
			return true
		case "summary":
			return suffix != "_bucket"
		}
	}
	return false
}

// Missing returns the names of names the catalog does not have, sorted,
// each once.
func (c Catalog) Missing(names []string) []string {
	var out []string
	for _, n := range names {
		if !c.Has(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

var (
	tableRow   = regexp.MustCompile(`^\|([^|]*)\|([^|]*)\|`)
	codeMetric = regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)`")
)

// Documented reads the tables of a metrics reference page in Markdown:
// each row whose first cell names one or more metrics in code spans
// (`a` / `b`) and whose second cell is their kind.
func Documented(md string) Catalog {
	c := Catalog{}
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		m := tableRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		kind := Kind(strings.TrimSpace(m[2]))
		switch kind {
		case "counter", "gauge", "histogram", "summary":
		default:
			continue
		}
		for _, n := range codeMetric.FindAllStringSubmatch(m[1], -1) {
			c[n[1]] = kind
		}
	}
	return c
}

// Query is a PromQL expression and where it is written (a panel's title,
// an alert's name), to name it in an error.
type Query struct {
	Where, Expr string
}

// Names returns the metric names every query reads, sorted, each once.
func Names(qs []Query) ([]string, error) {
	var all []string
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.Where, err)
		}
		all = append(all, names...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// Check returns an error for each query that cannot be read or that names
// a metric the catalog does not have, saying which query and which name.
func Check(qs []Query, c Catalog) []error {
	var errs []error
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
			continue
		}
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("%s: %q reads no metric", q.Where, q.Expr))
		}
		for _, n := range c.Missing(names) {
			errs = append(errs, fmt.Errorf("%s: no metric %s", q.Where, n))
		}
	}
	return errs
}

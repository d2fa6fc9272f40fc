package dashboards

import (
	"bufio"
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

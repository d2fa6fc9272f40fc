package main

import (
	"fmt"
	"io"
	"strings"
)

// writeTable writes rows as one markdown table, then each row's notes and
// what went wrong.
func writeTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| implementation | order | records/s | cpu µs/record | p50 ms | p99 ms | p99 in-process ms | check | duplicates | semantics |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|---:|---|")
	for _, r := range rows {
		if r.Status != "ok" {
			check := r.Status
			if r.Check != "" {
				check += ": " + r.Check
			}
			fmt.Fprintf(w, "| %s | %s | | | | | | %s | | %s |\n", r.Impl, r.Order, check, r.Semantics)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.0f | %.0f | %.1f | %s | %d | %s |\n",
			r.Impl, r.Order, thousands(r.RecordsPerSec), r.CPUusPerRecord, r.P50MS, r.P99MS, r.P99InprocMS,
			short(r.Check), r.Duplicates, r.Semantics)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		switch {
		case r.Notes != "":
			fmt.Fprintf(w, "- %s %s: %s\n", r.Impl, r.Order, r.Notes)
		case r.Status != "ok":
			fmt.Fprintf(w, "- %s %s: %s\n", r.Impl, r.Order, firstLine(r.Detail))
		}
	}
}

// short is the check as a table cell: pass, or FAIL and the first
// shortfall.
func short(check string) string {
	return strings.ReplaceAll(firstLine(check), "|", "/")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// thousands formats n with no decimals and commas: 123,456.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

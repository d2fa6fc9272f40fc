package dashboards

import (
	"fmt"
	"slices"
	"strings"
)

// MetricNames returns the metric names an expression in PromQL reads,
// sorted, each once: the identifiers that select series, not the
// functions, aggregations, keywords, label names, label values, numbers
// and durations around them. It also understands the Grafana variables a
// dashboard's queries hold ($pipeline, ${DS_PROMETHEUS},
// [$__rate_interval]). A selector without a metric name
// ({__name__=~"..."}) is an error: the metrics it reads cannot be checked.
//
// It is a reader of tokens, not a parser: an expression it accepts may
// still be one Prometheus refuses. It is meant to find the names.
func MetricNames(expr string) ([]string, error) {
	r := reader{s: expr, nameEnd: -1}
	var names []string
	for {
		tok, err := r.next()
		if err != nil {
			return nil, err
		}
		switch {
		case tok.kind == tokEOF:
			slices.Sort(names)
			return slices.Compact(names), nil
		case tok.kind == tokIdent:
			word, lower := tok.text, strings.ToLower(tok.text)
			followed := r.peekByte()
			switch {
			case grouping[lower]:
				// by (a, b), on (a), group_left (a) or group_left:
				// label names, not metrics.
				if followed == '(' {
					if err := r.skipGroup('(', ')'); err != nil {
						return nil, err
					}
				}
			case aggregations[lower] || keywords[lower]:
			case followed == '(':
				// A function call: its arguments are read next.
			default:
				names = append(names, word)
				r.nameEnd = r.identEnd
			}
		case tok.kind == tokBrace:
			if err := r.selector(tok.pos, r.nameEnd == tok.pos); err != nil {
				return nil, err
			}
		}
	}
}

// Keywords of PromQL that are not metric names when not followed by "(".
var (
	aggregations = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio")
	grouping = set("by", "without", "on", "ignoring", "group_left", "group_right")
	keywords = set("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end")
)

func set(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokBrace // "{": the start of label matchers
)

type token struct {
	kind tokKind
	text string
	pos  int
}

type reader struct {
	s        string
	i        int
	identEnd int // where the last identifier ends, spaces after it included
	nameEnd  int // the same for the last metric name: name{...} has one, {...} not
	parens   int // parentheses open
}

func (r *reader) peekByte() byte {
	j := r.i
	for j < len(r.s) && isSpace(r.s[j]) {
		j++
	}
	if j < len(r.s) {
		return r.s[j]
	}
	return 0
}

// next returns the next token that can name a metric or open label
// matchers, skipping strings, numbers, durations in brackets, comments,
// operators and Grafana variables.
func (r *reader) next() (token, error) {
	for r.i < len(r.s) {
		c := r.s[r.i]
		start := r.i
		switch {
		case isSpace(c):
			r.i++
		case c == '#':
			for r.i < len(r.s) && r.s[r.i] != '\n' {
				r.i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := r.skipString(); err != nil {
				return token{}, err
			}
		case c == '[':
			// A range or a subquery: durations and Grafana variables.
			if err := r.skipGroup('[', ']'); err != nil {
				return token{}, err
			}
		case c == '$':
			r.skipVariable()
		case c == '{':
			return token{kind: tokBrace, pos: start}, nil
		case c == '(':
			r.parens++
			r.i++
		case c == ')':
			if r.parens--; r.parens < 0 {
				return token{}, fmt.Errorf("unbalanced ')' at %d in %q", start, r.s)
			}
			r.i++
		case c == '}' || c == ']':
			return token{}, fmt.Errorf("unbalanced %q at %d in %q", c, start, r.s)
		case isDigit(c) || (c == '.' && r.i+1 < len(r.s) && isDigit(r.s[r.i+1])):
			r.skipNumber()
		case isIdentStart(c):
			for r.i < len(r.s) && isIdent(r.s[r.i]) {
				r.i++
			}
			r.identEnd = r.i
			for r.identEnd < len(r.s) && isSpace(r.s[r.identEnd]) {
				r.identEnd++
			}
			return token{kind: tokIdent, text: r.s[start:r.i], pos: start}, nil
		default:
			r.i++ // operators, parentheses, commas
		}
	}
	if r.parens > 0 {
		return token{}, fmt.Errorf("unclosed '(' in %q", r.s)
	}
	return token{kind: tokEOF, pos: r.i}, nil
}

// selector skips the label matchers that start at r.i ("{"). Without a
// metric name before them they must name one with __name__="...".
func (r *reader) selector(pos int, named bool) error {
	end, err := r.groupEnd('{', '}')
	if err != nil {
		return err
	}
	body := r.s[pos+1 : end]
	r.i = end + 1
	if !named && strings.Contains(body, "__name__") {
		return fmt.Errorf("selector %q names its metric by __name__: write the name before the braces", r.s[pos:end+1])
	}
	if !named {
		return fmt.Errorf("selector %q has no metric name", r.s[pos:end+1])
	}
	return nil
}

// skipGroup moves past the bracketed group that starts at r.i.
func (r *reader) skipGroup(open, close byte) error {
	for r.i < len(r.s) && isSpace(r.s[r.i]) {
		r.i++
	}
	end, err := r.groupEnd(open, close)
	if err != nil {
		return err
	}
	r.i = end + 1
	return nil
}

// groupEnd returns the index of the close matching the open at r.i,
// strings inside skipped.
func (r *reader) groupEnd(open, close byte) (int, error) {
	if r.i >= len(r.s) || r.s[r.i] != open {
		return 0, fmt.Errorf("want %q at %d in %q", open, r.i, r.s)
	}
	save := r.i
	defer func() { r.i = save }()
	depth := 0
	for r.i < len(r.s) {
		switch c := r.s[r.i]; c {
		case '"', '\'', '`':
			if err := r.skipString(); err != nil {
				return 0, err
			}
			continue
		case open:
			depth++
		case close:
			if depth--; depth == 0 {
				return r.i, nil
			}
		}
		r.i++
	}
	return 0, fmt.Errorf("unclosed %q at %d in %q", open, save, r.s)
}

func (r *reader) skipString() error {
	q := r.s[r.i]
	start := r.i
	r.i++
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case c == '\\' && q != '`':
			r.i += 2
			continue
		case c == q:
			r.i++
			return nil
		}
		r.i++
	}
	return fmt.Errorf("unterminated string at %d in %q", start, r.s)
}

// skipVariable moves past a Grafana variable: $name, ${name} or
// ${name:format}, [[name]] being inside brackets already.
func (r *reader) skipVariable() {
	r.i++
	if r.i < len(r.s) && r.s[r.i] == '{' {
		for r.i < len(r.s) && r.s[r.i] != '}' {
			r.i++
		}
		r.i++
		return
	}
	for r.i < len(r.s) && isIdent(r.s[r.i]) && r.s[r.i] != ':' {
		r.i++
	}
}

// skipNumber moves past a number: 1, 0.05, 1e3, 0x1f, or a duration
// (5m, 1h30m) after offset.
func (r *reader) skipNumber() {
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case isDigit(c) || isLetter(c) || c == '.' || c == '_':
		case (c == '+' || c == '-') && (r.s[r.i-1] == 'e' || r.s[r.i-1] == 'E'):
		default:
			return
		}
		r.i++
	}
}

func isSpace(c byte) bool      { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool      { return '0' <= c && c <= '9' }
func isLetter(c byte) bool     { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isIdentStart(c byte) bool { return isLetter(c) || c == '_' || c == ':' }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }

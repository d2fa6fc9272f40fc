// Package doclinks reads the project's Markdown (README.md and docs/) for
// its tests: the relative links and #anchors it holds, and the anchors
// GitHub gives its headings, so that a page moved or a heading renamed
// cannot leave a link pointing nowhere.
package doclinks

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Link is a link of a Markdown file: its target as written and the line
// it is on (1-based).
type Link struct {
	Target string
	Line   int
}

var (
	linkRE     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	mdLinkRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// lines calls fn with every line of md outside fenced code blocks.
func lines(md string, fn func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		fn(i+1, line)
	}
}

// Links returns the links of md, outside code blocks and code spans.
func Links(md string) []Link {
	var out []Link
	lines(md, func(n int, line string) {
		line = codeSpanRE.ReplaceAllString(line, "code")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, Link{Target: m[1], Line: n})
		}
	})
	return out
}

// External reports whether a link target leaves the repository (a URL
// with a scheme).
func External(target string) bool {
	i := strings.Index(target, ":")
	if i <= 0 {
		return false
	}
	for _, r := range target[:i] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Slug is the anchor GitHub gives a heading's text: lower case, every
// character but letters, digits, '-', '_' and spaces dropped, spaces
// turned to '-'. Markup is read as GitHub renders it: a link counts by its
// text, backticks and emphasis marks are dropped with the punctuation.
func Slug(heading string) string {
	heading = mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of md's headings (ATX headings outside code
// blocks), a repeated one numbered -1, -2 as GitHub does.
func Anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	lines(md, func(_ int, line string) {
		t := strings.TrimLeft(line, " ")
		if len(line)-len(t) > 3 {
			return
		}
		level := len(t) - len(strings.TrimLeft(t, "#"))
		if level < 1 || level > 6 || (len(t) > level && t[level] != ' ' && t[level] != '\t') {
			return
		}
		text := strings.TrimSpace(t[level:])
		text = strings.TrimSpace(strings.TrimRight(text, "#"))
		s := Slug(text)
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// FirstParagraph returns the first paragraph of md after its title (the
// first line, a level-1 heading), joined into one line.
func FirstParagraph(md string) string {
	var para []string
	for i, line := range strings.Split(md, "\n") {
		if i == 0 {
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" {
			if len(para) > 0 {
				break
			}
			continue
		}
		para = append(para, t)
	}
	return strings.Join(para, " ")
}

// GoBlocks returns the contents of md's fenced ```go blocks.
func GoBlocks(md string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case !in && t == "```go":
			in, cur = true, nil
		case in && t == "```":
			in = false
			out = append(out, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, line)
		}
	}
	return out
}

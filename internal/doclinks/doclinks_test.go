package doclinks

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// pages returns README.md and every Markdown page of docs/, by path
// relative to the repository's root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, n)
		out[filepath.ToSlash(rel)] = string(b)
	}
	if len(out) < 3 {
		t.Fatalf("found only %v", slices.Sorted(maps.Keys(out)))
	}
	return out
}

func TestSlugFollowsGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":                                   "quick-start",
		"Against the peers, on a real broker":           "against-the-peers-on-a-real-broker",
		"Priority sources — `source.Priority`":          "priority-sources--sourcepriority",
		"Deployed: every part a process of its own":     "deployed-every-part-a-process-of-its-own",
		"Why not go-streams' windows":                   "why-not-go-streams-windows",
		"snake_case and [a link](x.md) **bold**":        "snake_case-and-a-link-bold",
		"Home sensors: windows per home and minute, 2x": "home-sensors-windows-per-home-and-minute-2x",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := Anchors("# T\n## Tests\n```\n## Not a heading\n```\n## Tests\n#NoSpace\n")
	want := map[string]bool{"t": true, "tests": true, "tests-1": true}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("Anchors = %v, want %v", a, want)
	}
	l := Links("[a](x.md#y) `[b](not.md)`\n```\n[c](code.md)\n```\n![d](img.png \"title\")\n")
	if got := []Link{{"x.md#y", 1}, {"img.png", 5}}; !reflect.DeepEqual(l, got) {
		t.Errorf("Links = %v, want %v", l, got)
	}
}

// Every relative link of README.md and docs/ names a file that exists,
// and every #anchor one of the target page's headings.
func TestRelativeLinksResolve(t *testing.T) {
	all := pages(t)
	checked := 0
	for name, md := range all {
		for _, l := range Links(md) {
			if External(l.Target) {
				continue
			}
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := name
			if path != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", name, l.Line, l.Target, target)
					continue
				}
			}
			checked++
			if anchor == "" {
				continue
			}
			md, ok := all[target]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, target))
				if err != nil || !strings.HasSuffix(target, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into %s, which is not a Markdown page", name, l.Line, l.Target, target)
					continue
				}
				md = string(b)
			}
			if !Anchors(md)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", name, l.Line, l.Target, target, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links checked: is the link pattern still right?", checked)
	}
}

// Every guide in docs/ opens, under its title, with what the reader will
// be able to do after reading it.
func TestPagesSayWhatTheReaderCanDo(t *testing.T) {
	for name, md := range pages(t) {
		if name == "README.md" {
			continue
		}
		if !strings.HasPrefix(md, "# ") {
			t.Errorf("%s: does not start with a title", name)
		}
		if p := FirstParagraph(md); !strings.HasPrefix(p, "After reading this page you can ") {
			t.Errorf("%s: first paragraph %.60q... does not say what the reader can do after reading it", name, p)
		}
	}
}

// The README is a newcomer's first minutes; the depth is in docs/.
func TestReadmeIsShort(t *testing.T) {
	md := pages(t)["README.md"]
	if n := strings.Count(md, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, more than 250: move the depth to a page of docs/", n)
	}
}

// funcBody returns the statements of the function name in the Go source
// src, one trimmed line each, comments left out.
func funcBody(t *testing.T, src []byte, name string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		t.Fatalf("parsing the source of %s: %v", name, err)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != name || fd.Body == nil {
			continue
		}
		body := src[fset.Position(fd.Body.Lbrace).Offset+1 : fset.Position(fd.Body.Rbrace).Offset]
		var out []string
		for _, line := range strings.Split(string(body), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "//") {
				out = append(out, line)
			}
		}
		return out
	}
	t.Fatalf("no func %s", name)
	return nil
}

// The README's program is stream.Example, whose output go test checks,
// and the same program opens docs/getting-started.md. It also builds on
// its own, as a main package of a module that requires this one.
func TestReadmeProgramIsTheStreamExample(t *testing.T) {
	all := pages(t)
	example, err := os.ReadFile(filepath.Join(root, "stream", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	want := funcBody(t, example, "Example")
	var program string
	for _, name := range []string{"README.md", "docs/getting-started.md"} {
		blocks := GoBlocks(all[name])
		if len(blocks) == 0 {
			t.Fatalf("%s has no Go block", name)
		}
		got := funcBody(t, []byte(blocks[0]), "main")
		if !slices.Equal(got, want) {
			t.Errorf("%s: the first Go block's main differs from stream.Example:\n%s\nwant\n%s",
				name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if program == "" {
			program = blocks[0]
		} else if blocks[0] != program {
			t.Errorf("%s: the program differs from README.md's", name)
		}
	}
	// The output the README shows is the one the example checks.
	_, out, _ := strings.Cut(string(example), "// Output:\n")
	out, _, _ = strings.Cut(out, "}")
	var wantOut []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		wantOut = append(wantOut, strings.TrimPrefix(strings.TrimSpace(line), "// "))
	}
	if shown := strings.Join(wantOut, "\n") + "\n"; !strings.Contains(all["README.md"], "$ go run .\n"+shown) {
		t.Errorf("README.md does not show the example's output after `$ go run .`:\n%s", shown)
	}

	if testing.Short() {
		t.Skip("building the program: not in -short")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/readme\n\ngo 1.26.0\n\nrequire github.com/sluice-streams/sluice v0.0.0\n\n" +
		"replace github.com/sluice-streams/sluice => " + abs + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(program)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the README's program does not build: %v\n%s", err, stderr.String())
	}
}

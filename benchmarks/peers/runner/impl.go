package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultImpls are the implementations the runner runs unless told, in
// the table's order.
//
// go-streams' Kafka connector is not among them: its module,
// github.com/reugn/go-streams/kafka, is not served by the Go module proxy
// (kafka/v0.1.1 and kafka/v0.1.2 answer 403), so there is no peer to
// build. Its code marks each record's offset before handing the record on
// (session.MarkMessage in ConsumeClaim): a crash would lose the records in
// flight, at most once, a weaker guarantee than the table's. A
// benchmarks/peers/gostreams module, should the proxy serve it, runs with
// -impl gostreams.
var DefaultImpls = []string{"sluice", "franzgo", "watermill", "parallel-consumer"}

// ErrNotBuilt is wrapped when an implementation's folder (or the Java
// peer's build.sh) is missing: its rows say "not built" and the run goes
// on.
var ErrNotBuilt = errors.New("not built")

// how says how an implementation is built and started.
type how int

const (
	mainModule  how = iota // a package of the main module: go build -o
	ownModule              // a Go module of its own: cd there && go build -o
	buildScript            // build.sh prints the command line on its last stdout line
)

var hows = map[string]how{
	"sluice":            mainModule,
	"franzgo":           mainModule,
	"watermill":         ownModule,
	"gostreams":         ownModule,
	"parallel-consumer": buildScript,
}

// build builds implementation name of the repository at root, putting Go
// binaries in bin, and returns the command line that starts it, without
// the protocol's flags. flags are added to go build.
func build(ctx context.Context, root, bin, name string, flags []string) ([]string, error) {
	h, ok := hows[name]
	if !ok {
		return nil, fmt.Errorf("unknown implementation %q (known: %s)", name, strings.Join(DefaultImpls, ", "))
	}
	dir := filepath.Join(root, "benchmarks", "peers", name)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: no folder %s", ErrNotBuilt, dir)
	}
	switch h {
	case mainModule, ownModule:
		exe := filepath.Join(bin, name)
		args := append([]string{"build", "-o", exe}, flags...)
		cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build in %s: %w\n%s", dir, err, out)
		}
		return []string{exe}, nil
	default:
		script := filepath.Join(dir, "build.sh")
		if _, err := os.Stat(script); err != nil {
			return nil, fmt.Errorf("%w: no %s", ErrNotBuilt, script)
		}
		cmd := exec.CommandContext(ctx, "bash", script)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", script, err, tail(stderr.Bytes(), 4000))
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		argv := strings.Fields(lines[len(lines)-1])
		if len(argv) == 0 {
			return nil, fmt.Errorf("%s printed no command line", script)
		}
		return argv, nil
	}
}

// findRoot returns the main module's root: the nearest folder above the
// working directory holding a go.mod of module sluice.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/sluice-streams/sluice\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the runner inside the sluice repository (no go.mod of module github.com/sluice-streams/sluice above the working directory)")
		}
		dir = parent
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

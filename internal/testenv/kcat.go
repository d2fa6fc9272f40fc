package testenv

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"
)

// Kcat runs kcat (Debian package kcat) with args and stdin, bounded to 30
// seconds, and returns its standard output. A missing kcat fails the test
// with the command that installs it.
func Kcat(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: make test installs it (or: sudo apt-get install -y kcat)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %v: %v\n%s", args, err, errb.String())
	}
	return out.Bytes()
}

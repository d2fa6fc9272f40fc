package kafka

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The warning that nothing commits comes once, UncommittedWarning after
// the first settle, and never once Commit has been called or with a
// negative UncommittedWarning.
func TestUncommittedWarningOnceAfterTheInterval(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	state := func(d time.Duration) (*Source, *strings.Builder) {
		var buf strings.Builder
		return newState(Config{Topics: []string{"in"}, UncommittedWarning: d}, slog.New(slog.NewTextHandler(&buf, nil))), &buf
	}
	warned := func(buf *strings.Builder) int { return strings.Count(buf.String(), "have not been committed") }

	s, buf := state(time.Minute)
	s.warnUncommitted(t0.Add(time.Hour))
	if n := warned(buf); n != 0 {
		t.Fatalf("warned %d times with nothing settled", n)
	}
	s.firstSettle.Store(t0.UnixNano())
	s.warnUncommitted(t0.Add(time.Minute - time.Millisecond))
	if n := warned(buf); n != 0 {
		t.Fatalf("warned %d times before the interval", n)
	}
	s.warnUncommitted(t0.Add(time.Minute))
	s.warnUncommitted(t0.Add(time.Hour))
	if n := warned(buf); n != 1 || !strings.Contains(buf.String(), "level=WARN") ||
		!strings.Contains(buf.String(), "settled records of in have not been committed for 1m0s: end the pipeline with checkpoint.New(src) or call src.Commit") {
		t.Fatalf("want one warning naming the topic and the fix, got %q", buf.String())
	}

	s, buf = state(time.Minute)
	s.firstSettle.Store(t0.UnixNano())
	s.commitCalled.Store(true)
	s.warnUncommitted(t0.Add(time.Hour))
	if n := warned(buf); n != 0 {
		t.Fatalf("warned %d times after a commit", n)
	}

	s, buf = state(-1)
	s.firstSettle.Store(t0.UnixNano())
	s.warnUncommitted(t0.Add(time.Hour))
	if n := warned(buf); n != 0 {
		t.Fatalf("warned %d times with the warning off", n)
	}
}

package main

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// sluice loadgen -record writes what it sent to the file, which reads back
// as what it sent; a path that cannot be written stops it before it sends.
func TestLoadgenRecord(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "delivery-requests")
	dir := t.TempDir()
	path := filepath.Join(dir, "sent.jsonl")
	sent, err := loadgenCmd(context.Background(), []string{"-brokers", brokers[0], "-rate", "500", "-burst", "0",
		"-duration", "500ms", "-record", path})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := loadgen.ReadRecord(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds, dups := sent.Kinds()
	backKinds, backDups := back.Kinds()
	if len(kinds) == 0 || !maps.Equal(kinds, backKinds) || dups != backDups || back.Total() != sent.Total() {
		t.Fatalf("the record read back holds %d requests (%d duplicates, %d sent); the load generator sent %d (%d, %d)",
			len(backKinds), backDups, back.Total(), len(kinds), dups, sent.Total())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d files beside the record, want none: %v", len(entries)-1, entries)
	}

	err = runLoadgen(context.Background(), []string{"-brokers", "127.0.0.1:1", "-record", filepath.Join(dir, "missing", "sent.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "-record") || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("an unwritable record: %v, want an error naming -record before connecting", err)
	}
}

// sluice loadgen -level-topics produces each request to its level's topic
// in the -mix; a -mix that does not name one share per level is refused.
func TestLoadgenLevelTopics(t *testing.T) {
	topics := []string{"req-high", "req-normal", "req-low"}
	brokers := testenv.Kfake(t, 2, topics...)
	sent, err := loadgenCmd(context.Background(), []string{"-brokers", brokers[0], "-rate", "1000", "-burst", "0",
		"-duration", "300ms", "-level-topics", strings.Join(topics, ","), "-mix", "1,0,1"})
	if err != nil {
		t.Fatal(err)
	}
	if lv := sent.Levels(); lv[0] == 0 || lv[1] != 0 || lv[2] == 0 || lv[0]+lv[2] != sent.Total() {
		t.Fatalf("sent %v by level with -mix 1,0,1", lv)
	}
	for _, mix := range []string{"0.5,0.5", "a,b,c", "0.1,-0.3,0.6"} {
		if _, err := loadgenCmd(context.Background(), []string{"-brokers", brokers[0], "-mix", mix}); err == nil || !strings.Contains(err.Error(), "-mix") {
			t.Errorf("-mix %s: %v, want an error naming -mix", mix, err)
		}
	}
}

// sluice loadgen against a broker that does not answer, or without its
// topic, stops before it sends, naming the broker or the topic, and
// writes no record: a record of requests no broker received would have
// verify expect them. (Before: "sent 202 requests in 32.005s ...", the
// record written, then "flushing: context deadline exceeded".)
func TestLoadgenFailsFastWithoutBrokerOrTopic(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	brokers := testenv.Kfake(t, 2, "delivery-requests")
	for _, c := range []struct{ args []string }{
		{[]string{"-brokers", closed}},
		{[]string{"-brokers", brokers[0], "-topic", "other-requests"}},
		{[]string{"-brokers", brokers[0], "-level-topics", "delivery-requests,other-normal,delivery-requests"}},
	} {
		want := closed
		if c.args[1] != closed {
			want = `"other-`
		}
		record := filepath.Join(t.TempDir(), "sent.jsonl")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := runLoadgen(ctx, append(c.args, "-rate", "100", "-burst", "0", "-duration", "2s", "-record", record))
		late := ctx.Err()
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) || late != nil {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, want)
		}
		if _, err := os.Stat(record); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: a record was written (%v)", c.args, err)
		}
	}
}

// A rate that cannot pace the load stops demo and loadgen before they
// start anything, naming the flag: at -rate 0 or below the load would
// never end.
func TestLoadRatesAreCheckedFirst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		run  func(context.Context, []string) error
		args []string
		want string
	}{
		{runDemo, []string{"-rate", "-5", "-listen", "", "-duration", "2s"}, "-rate -5: "},
		{runDemo, []string{"-burst", "-1", "-listen", "", "-duration", "2s"}, "-burst -1: "},
		{runLoadgen, []string{"-rate", "0", "-brokers", closed}, "-rate 0: "},
		{runLoadgen, []string{"-rate", "100", "-burst", "-2", "-brokers", closed}, "-burst -2: "},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.run(ctx, c.args)
		late := ctx.Err()
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) || late != nil {
			t.Errorf("%v: %v, want an error naming %q at once", c.args, err, c.want)
		}
	}
}

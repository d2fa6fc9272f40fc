package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// The count sluice loadgen ends with is what the brokers acknowledged: a
// consumer reading the topic back finds exactly that many records. Its
// progress lines go to standard error, its result to standard output.
func TestLoadgenSummaryCountsWhatAConsumerReads(t *testing.T) {
	brokers := testenv.Kfake(t, 4, "delivery-requests")
	var out, progress testenv.Buffer
	loadgenOutput, progressOutput = &out, &progress
	defer func() { loadgenOutput, progressOutput = os.Stdout, os.Stderr }()
	sent, err := loadgenCmd(context.Background(), []string{"-brokers", brokers[0], "-rate", "2000", "-burst", "0",
		"-duration", "400ms", "-progress-every", "100ms"})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^acknowledged by the brokers: (\d+) requests in `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no count of acknowledged requests in:\n%s", out.String())
	}
	said, _ := strconv.ParseInt(m[1], 10, 64)
	var end int64
	for _, o := range testenv.EndOffsets(t, brokers, "delivery-requests") {
		end += o
	}
	read := consumeCount(t, brokers, "delivery-requests", end)
	if said == 0 || said != read || said != sent.Total() {
		t.Fatalf("the summary says %d acknowledged; a consumer read %d records back; the record counts %d", said, read, sent.Total())
	}
	for _, l := range strings.Split(strings.TrimSpace(progress.String()), "\n") {
		if l != "" && !progressLine.MatchString(l) {
			t.Errorf("a progress line not of the form: %q", l)
		}
	}
	start := time.Now()
	got := newLoadProgress(sent, &progress, start).line(start.Add(2 * time.Second))
	want := fmt.Sprintf("loadgen 2s: sent %d, acknowledged %d, failed 0; %.0f/s acknowledged", sent.Produced(), said, float64(said)/2)
	if got != want || sent.Produced() < said {
		t.Errorf("progress line %q, want %q", got, want)
	}
	if strings.Contains(out.String(), "loadgen ") {
		t.Errorf("progress on standard output:\n%s", out.String())
	}
}

// progressLine is the form of a progress line.
var progressLine = regexp.MustCompile(`^loadgen [0-9.hms]+: sent \d+, acknowledged \d+, failed \d+; \d+/s acknowledged$`)

// consumeCount reads topic from its start until want records came, or
// 20 s passed, and returns how many it read.
func consumeCount(t *testing.T, brokers []string, topic string, want int64) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var n int64
	for n < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		n += int64(fs.NumRecords())
	}
	return n
}

// A progress line every interval, with the figures of the record: the
// interval is injected, and the clock is synctest's.
func TestLoadgenProgressLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testenv.Buffer
		p := newLoadProgress(loadgen.NewSent(), &buf, time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.run(ctx, 5*time.Second) }()
		time.Sleep(15*time.Second + time.Millisecond)
		cancel()
		<-done
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		want := []string{"loadgen 5s: sent 0, acknowledged 0, failed 0; 0/s acknowledged",
			"loadgen 10s: sent 0, acknowledged 0, failed 0; 0/s acknowledged",
			"loadgen 15s: sent 0, acknowledged 0, failed 0; 0/s acknowledged"}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Fatalf("lines:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
		}
		var none testenv.Buffer
		newLoadProgress(loadgen.NewSent(), &none, time.Now()).run(context.Background(), 0) // 0: none, and returns
		if none.String() != "" {
			t.Fatalf("-progress-every 0 wrote %q", none.String())
		}
	})
}

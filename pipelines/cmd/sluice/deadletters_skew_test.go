package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// Review: the key skip compares a dead letter's sluice-failed-at (the
// worker's clock, stamped when the stage failed) with the marker's record
// timestamp (the replay tool's clock, stamped when the marker is produced,
// after the replayed record was acknowledged). A replayed request that
// fails again at once — a malformed or invalid one takes milliseconds —
// can carry a failed-at before the marker's timestamp (worker clock a
// little behind, or just the race between the worker's fetch and the
// tool's second ProduceSync), and the next replay skips it as "replayed
// before", although it carries sluice-replayed-from naming the replayed
// dead letter: it is by construction newer than the replay.
func TestRefailedReplayIsNotSkippedByClock(t *testing.T) {
	brokers, cl := dlCluster(t, kfake.SeedTopics(1, "delivery-requests", "delivery-dead-letters"))
	dl := func(failedAt time.Time, extra ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: "delivery-dead-letters", Key: []byte("r-null"), Value: []byte("null"), Headers: append([]kgo.RecordHeader{
			{Key: kafkasink.HeaderStage, Value: []byte("parse")}, {Key: kafkasink.HeaderReason, Value: []byte("invalid delivery request: id is missing")},
			{Key: kafkasink.HeaderFailedAt, Value: []byte(failedAt.UTC().Format(time.RFC3339Nano))},
			{Key: kafkasink.HeaderTopic, Value: []byte("delivery-requests")}, {Key: kafkasink.HeaderPartition, Value: []byte("0")},
			{Key: kafkasink.HeaderOffset, Value: []byte("0")}}, extra...)}
	}
	if err := cl.ProduceSync(context.Background(), dl(time.Now().Add(-time.Hour))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	defer func() { t.Log(out.String()) }()
	if err := runReplay(context.Background(), []string{"-brokers", brokers}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 1 of the 1") {
		t.Fatalf("first replay:\n%s", out.String())
	}
	// The replayed request fails again at once; the worker's clock is 20 ms
	// behind the operator's (or the worker failed it before the tool
	// stamped its marker).
	again := dl(time.Now().Add(-20*time.Millisecond), kgo.RecordHeader{Key: kafkasink.HeaderReplayedFrom, Value: []byte("delivery-dead-letters/0/0")})
	if err := cl.ProduceSync(context.Background(), again).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runReplay(context.Background(), []string{"-brokers", brokers, "-dry-run"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "would replay 1 of the 2") {
		t.Fatalf("the dead letter of the replay that failed again (sluice-replayed-from 0/0) is skipped as replayed before:\n%s", out.String())
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
	streamsource "github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// An operator on Redis Streams lists the dead letters of a stream, each
// named by its entry ID, and replays them to the stream they came from,
// with their key, value and headers as they came, once.
func TestDeadLettersOnRedisStreams(t *testing.T) {
	ctx := context.Background()
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	p := redisstream.NewProducer(rc)
	defer p.Close()
	failedAt := time.Now().UTC().Format(time.RFC3339Nano)
	var originals []string
	for i, why := range []string{"invalid delivery request: no owner", "invalid delivery request: no owner", "malformed delivery request"} {
		key, value := fmt.Sprintf("r-%d", i), fmt.Sprintf(`{"id": "r-%d"}`, i)
		id, err := rc.Do(ctx, redisstream.AppendFields([]any{"XADD", "delivery-requests", "*"}, redisstream.Entry{Key: []byte(key), Value: []byte(value),
			Headers: []stream.Header{{Key: "traceparent", Value: []byte("00-1-01")}, {Key: "tenant", Value: []byte("a")}}})...).Text()
		if err != nil {
			t.Fatal(err)
		}
		originals = append(originals, id)
		off, _ := streamsource.Offset(id)
		dl := &kgo.Record{Topic: "delivery-dead-letters", Key: []byte(key), Value: []byte(value), Headers: []kgo.RecordHeader{
			{Key: "traceparent", Value: []byte("00-1-01")}, {Key: "tenant", Value: []byte("a")},
			{Key: kafkasink.HeaderStage, Value: []byte("parse")}, {Key: kafkasink.HeaderReason, Value: []byte(why)},
			{Key: kafkasink.HeaderFailedAt, Value: []byte(failedAt)}, {Key: kafkasink.HeaderTopic, Value: []byte("delivery-requests")},
			{Key: kafkasink.HeaderPartition, Value: []byte("0")}, {Key: kafkasink.HeaderOffset, Value: fmt.Appendf(nil, "%d", off)}}}
		if err := produceSync(ctx, p, dl); err != nil {
			t.Fatal(err)
		}
	}
	dead := streamRecords(t, rc, "delivery-dead-letters")
	redisArgs := []string{"-transport", "redis", "-redis", addr}
	var out bytes.Buffer
	defer func() { t.Log(out.String()) }()
	if err := listDeadLetters(ctx, redisArgs, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"delivery-dead-letters: 3 dead letters, 0 replayed", "2  parse            invalid delivery request",
		"(entry ID, failed at", "  " + streamsource.EntryID(dead[0].Offset) + "  "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sluice deadletters -transport redis does not show %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := listDeadLetters(ctx, append(redisArgs, "-json", "-reason", "malformed"), &out); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Total, Matched int
		Records        []dlJSON
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Total != 3 || len(doc.Records) != 1 ||
		doc.Records[0].ID != streamsource.EntryID(dead[2].Offset) || doc.Records[0].SourceID != originals[2] {
		t.Fatalf("-json -reason malformed: %v, want the entry IDs %s (source %s)\n%s", err, streamsource.EntryID(dead[2].Offset), originals[2], out.String())
	}

	out.Reset()
	if err := runReplay(ctx, append(redisArgs, "-reason", "invalid"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 2 of the 2 dead letters selected from delivery-dead-letters; 2 to delivery-requests") {
		t.Fatalf("replay said:\n%s", out.String())
	}
	requests := streamRecords(t, rc, "delivery-requests")
	if len(requests) != 5 {
		t.Fatalf("delivery-requests holds %d entries, want the 3 requests and the 2 replayed", len(requests))
	}
	for i, r := range requests[3:] {
		want := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-1-01")}, {Key: "tenant", Value: []byte("a")},
			{Key: kafkasink.HeaderReplayedFrom, Value: []byte("delivery-dead-letters/" + streamsource.EntryID(dead[i].Offset))}}
		if string(r.Key) != fmt.Sprintf("r-%d", i) || string(r.Value) != fmt.Sprintf(`{"id": "r-%d"}`, i) || !reflect.DeepEqual(r.Headers, want) {
			t.Fatalf("replayed entry %d: key %q value %q headers %q; want r-%d as it came, headers %q", i, r.Key, r.Value, r.Headers, i, want)
		}
	}
	// Once: a second replay skips them, and the list says they were.
	out.Reset()
	if err := runReplay(ctx, append(redisArgs, "-reason", "invalid"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 0 of the 2") || !strings.Contains(out.String(), "skipped: 2 replayed before") {
		t.Fatalf("second replay said:\n%s", out.String())
	}
	out.Reset()
	if err := listDeadLetters(ctx, redisArgs, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "3 dead letters, 2 replayed") || !strings.Contains(out.String(), "[replayed to delivery-requests]") {
		t.Fatalf("the list after the replay:\n%s", out.String())
	}
}

// A dead letter the Redis Streams source writes itself (an entry
// delivered more often than MaxDeliveries: its fields as they were, then
// the reason, the deliveries and the entry ID) is replayed to its stream
// as the message came: the headers of its dead-lettering stay behind, so
// that the entry, failing again, is not taken for one delivered that
// often already or read at its old ID.
func TestReplayOfAPoisonEntryLeavesItsDeadLetteringBehind(t *testing.T) {
	ctx := context.Background()
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	id, err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "requests", Values: []any{"value", "v", "key", "k", "h:traceparent", "00-1-01"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	off, _ := streamsource.Offset(id)
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "requests-dead-letters", Values: []any{"value", "v", "key", "k", "h:traceparent", "00-1-01",
		"h:sluice-reason", "delivered 11 times, more than MaxDeliveries 10", "h:sluice-deliveries", "11",
		"h:sluice-source-topic", "requests", "h:sluice-source-offset", fmt.Sprint(off), "h:sluice-source-id", id,
		"h:sluice-stage", "source", "h:sluice-failed-at", time.Now().UTC().Format(time.RFC3339)}}).Err(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runReplay(ctx, []string{"-transport", "redis", "-redis", addr, "-topic", "requests-dead-letters"}, &out); err != nil {
		t.Fatal(err)
	}
	recs := streamRecords(t, rc, "requests")
	if len(recs) != 2 {
		t.Fatalf("requests holds %d entries, want the entry and its replay; the replay said:\n%s", len(recs), out.String())
	}
	dead := streamRecords(t, rc, "requests-dead-letters")[0]
	want := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-1-01")},
		{Key: kafkasink.HeaderReplayedFrom, Value: []byte("requests-dead-letters/" + streamsource.EntryID(dead.Offset))}}
	if r := recs[1]; string(r.Key) != "k" || string(r.Value) != "v" || !reflect.DeepEqual(r.Headers, want) {
		t.Fatalf("replayed as key %q value %q headers %q; want k, v, headers %q", r.Key, r.Value, r.Headers, want)
	}
}

// A -topic naming no stream (a typo, or nothing dead-lettered yet) says
// so, instead of a bare "0 dead letters" that reads as all clear; an
// empty stream of that name does not.
func TestDeadLettersOnRedisNamesAMissingStream(t *testing.T) {
	ctx := context.Background()
	addr := testenv.Redis(t)
	rc := newRedisClient(t, addr)
	var out bytes.Buffer
	if err := listDeadLetters(ctx, []string{"-transport", "redis", "-redis", addr, "-topic", "delivery-dead-leters"}, &out); err != nil {
		t.Fatal(err)
	}
	if want := "no stream delivery-dead-leters on redis at " + addr; !strings.Contains(out.String(), want) {
		t.Errorf("sluice deadletters -topic of no stream = %q, want it to say %q", out.String(), want)
	}
	id, err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "emptied", Values: []any{"value", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.XDel(ctx, "emptied", id).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := listDeadLetters(ctx, []string{"-transport", "redis", "-redis", addr, "-topic", "emptied"}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "no stream") {
		t.Errorf("sluice deadletters on an empty stream = %q, want no word of a missing stream", out.String())
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
)

// topicRecords reads a topic to its end.
func topicRecords(t *testing.T, brokers, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	if err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers)}, topic, time.Time{}, func(r *kgo.Record) bool {
		out = append(out, r)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// An operator lists the scheduler's dead letters — counts by stage and
// reason, the records as they came — and replays the ones a fix makes
// good: back to the requests topic, byte for byte with their key and
// headers, once per request id however often the replay is run.
func TestDeadLettersListAndReplay(t *testing.T) {
	brokers, cl := dlCluster(t, kfake.SeedTopics(2, "delivery-requests", "delivery-failures", "delivery-dead-letters",
		"delivery-requests-retry"))
	bad := []*kgo.Record{
		{Key: []byte("r-null"), Value: []byte("null"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-1-01")}}},
		{Key: []byte("r-owner"), Value: []byte(`{"id": "r-owner",  "owner": ""}`)},
		{Key: []byte("r-owner"), Value: []byte(`{"id": "r-owner", "owner": "" }`)}, // a second copy of the same request
		{Key: []byte("r-broken"), Value: []byte(`{"id": "r-broken", `)},
	}
	for _, r := range bad {
		r.Topic = "delivery-requests"
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"delivery", "-brokers", brokers, "-listen", "127.0.0.1:0", "-backends", "sim", "-log-level", "error"})
	}()
	for deadline := time.Now().Add(30 * time.Second); len(topicRecords(t, brokers, "delivery-dead-letters")) < len(bad); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler did not dead-letter the bad requests")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	requestsBefore := len(topicRecords(t, brokers, "delivery-requests"))
	var out bytes.Buffer
	defer func() { t.Log(out.String()) }()

	if err := listDeadLetters(context.Background(), []string{"-brokers", brokers}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"delivery-dead-letters: 4 dead letters, 0 replayed", "3  parse            invalid delivery request",
		"1  parse            malformed delivery request", `key="r-null"  value="null"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sluice deadletters does not show %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := listDeadLetters(context.Background(), []string{"-brokers", brokers, "-json", "-reason", "malformed"}, &out); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Total, Matched int
		Records        []dlJSON
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Total != 4 || doc.Matched != 1 || len(doc.Records) != 1 ||
		*doc.Records[0].Value != `{"id": "r-broken", ` || doc.Records[0].SourceTopic != "delivery-requests" || doc.Records[0].Stage != "parse" {
		t.Fatalf("-json -reason malformed: %v\n%s", err, out.String())
	}

	// A dry run sends nothing.
	out.Reset()
	if err := runReplay(context.Background(), []string{"-brokers", brokers, "-reason", "invalid", "-dry-run"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(topicRecords(t, brokers, "delivery-requests")); n != requestsBefore || !strings.Contains(out.String(), "would replay 2 of the 3") {
		t.Fatalf("dry run: the requests topic went from %d to %d records; it said:\n%s", requestsBefore, n, out.String())
	}
	// The replay: one record per request id, as it came.
	out.Reset()
	if err := runReplay(context.Background(), []string{"-brokers", brokers, "-reason", "invalid"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 2 of the 3 dead letters selected from delivery-dead-letters; 2 to delivery-requests") ||
		!strings.Contains(out.String(), "1 older copies of a key replayed once") {
		t.Fatalf("replay said:\n%s", out.String())
	}
	replayed := map[string]*kgo.Record{}
	for _, r := range topicRecords(t, brokers, "delivery-requests")[0:] {
		if headerOf(r, kafkasink.HeaderReplayedFrom) != nil {
			replayed[string(r.Key)] = r
		}
	}
	if len(replayed) != 2 || !bytes.Equal(replayed["r-null"].Value, []byte("null")) ||
		string(headerOf(replayed["r-null"], "traceparent")) != "00-1-01" || headerOf(replayed["r-null"], kafkasink.HeaderStage) != nil ||
		headerOf(replayed["r-null"], kafkasink.HeaderReason) != nil || replayed["r-owner"] == nil {
		t.Fatalf("replayed records: %v", replayed)
	}
	// Again: nothing more is sent, and the list shows them replayed.
	out.Reset()
	if err := runReplay(context.Background(), []string{"-brokers", brokers, "-reason", "invalid"}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(topicRecords(t, brokers, "delivery-requests")); n != requestsBefore+2 || !strings.Contains(out.String(), "skipped: 3 replayed before") {
		t.Fatalf("second replay: the requests topic holds %d records (want %d); it said:\n%s", n, requestsBefore+2, out.String())
	}
	out.Reset()
	if err := listDeadLetters(context.Background(), []string{"-brokers", brokers}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "4 dead letters, 2 replayed") || !strings.Contains(out.String(), "[replayed to delivery-requests]") {
		t.Fatalf("list after the replay:\n%s", out.String())
	}
	// The replayed request fails again: its new dead letter is not one
	// replayed before, and a replay sends it.
	again := &kgo.Record{Topic: "delivery-dead-letters", Key: []byte("r-null"), Value: []byte("null"), Headers: []kgo.RecordHeader{
		{Key: kafkasink.HeaderStage, Value: []byte("parse")}, {Key: kafkasink.HeaderReason, Value: []byte("invalid delivery request: id is missing")},
		{Key: kafkasink.HeaderFailedAt, Value: []byte(time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))},
		{Key: kafkasink.HeaderTopic, Value: []byte("delivery-requests")}}}
	if err := cl.ProduceSync(context.Background(), again).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runReplay(context.Background(), []string{"-brokers", brokers, "-key", "r-null"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 1 of the 2 dead letters") || !strings.Contains(out.String(), "skipped: 1 replayed before") {
		t.Fatalf("replay of a request dead-lettered again after its replay:\n%s", out.String())
	}
}

// dlCluster starts a broker with the topics and returns its address and a
// client of it, both closed when the test ends.
func dlCluster(t *testing.T, topics kfake.Opt) (string, *kgo.Client) {
	t.Helper()
	brokers := testenv.KfakeWith(t, topics)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return brokers[0], cl
}

package delivery_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// refusingDrones refuses, for good, to book a drone for one request.
type refusingDrones struct {
	delivery.Drones
	id string
}

func (d refusingDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	if id == d.id {
		return "", errors.New("no drone for this route")
	}
	return d.Drones.Schedule(ctx, id, at)
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// headers counts r's headers named key.
func headers(r *kgo.Record, key string) int {
	n := 0
	for _, h := range r.Headers {
		if h.Key == key {
			n++
		}
	}
	return n
}

// Every dead letter and failure event carries the request's record as it
// came — value byte for byte, key, headers — with the failure in headers;
// the scheduler's state (the steps done) goes beside it in a header of its
// own, not instead of the input. (Found in review: a request that failed
// validation was re-encoded, so that an input of null became a full zero
// request, and a failure event was a Progress object that could not be
// sent back to the requests topic.)
func TestFailuresCarryTheRecordAsItCame(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "requests"), kfake.SeedTopics(1, "failures"), kfake.SeedTopics(1, "dead"))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	good := requestRecord("requests", "", "refused")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, good.Value, "", "   "); err != nil { // whitespace a re-encoding would lose
		t.Fatal(err)
	}
	refused := &kgo.Record{Topic: "requests", Key: []byte("key-of-refused"), Value: pretty.Bytes(),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-abc-01")}}}
	null := &kgo.Record{Topic: "requests", Key: []byte("k-null"), Value: []byte("null"), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("x")}}}
	broken := &kgo.Record{Topic: "requests", Key: []byte("k-broken"), Value: []byte(`{"id": "b-1", `)}
	if err := producer.ProduceSync(context.Background(), refused, null, broken).FirstErr(); err != nil {
		t.Fatal(err)
	}
	backends := delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	backends.Drones = refusingDrones{backends.Drones, "refused"}
	var logs testenv.Buffer
	runUntilSettled(t, brokers, producer, backends, 3, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, want := range []string{
		`level=WARN msg="request failed for good: compensating it" request=refused key=key-of-refused stage=schedule_drone reason="no drone for this route"`,
		`level=ERROR msg="request dead-lettered: it cannot be processed as it is" key=k-null stage=parse reason="invalid delivery request: id is missing"`,
		`level=ERROR msg="request dead-lettered: it cannot be processed as it is" key=k-broken stage=parse reason="malformed delivery request:`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, logs.String())
		}
	}

	events := readTopic(t, brokers, "failures", 1)
	if len(events) != 1 {
		t.Fatalf("%d failure events, want 1", len(events))
	}
	ev := events[0]
	if !bytes.Equal(ev.Value, pretty.Bytes()) || string(ev.Key) != "key-of-refused" || string(header(ev, "traceparent")) != "00-abc-01" {
		t.Fatalf("failure event: key %q, value %q, headers %v; want the request's record as it came", ev.Key, ev.Value, ev.Headers)
	}
	for k, want := range map[string]string{kafkasink.HeaderStage: "schedule_drone", kafkasink.HeaderTopic: "requests",
		kafkasink.HeaderPartition: "0", kafkasink.HeaderOffset: "0"} {
		if got := string(header(ev, k)); got != want {
			t.Errorf("failure event header %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{kafkasink.HeaderReason, kafkasink.HeaderFailedAt, kafkasink.HeaderAttempt} {
		if header(ev, k) == nil {
			t.Errorf("failure event has no %s", k)
		}
	}
	c, err := delivery.DecodeCompensation(ev.Value, func(k string) []byte { return header(ev, k) })
	if err != nil || c.Progress.Request.ID != "refused" || c.Stage != "schedule_drone" || !strings.Contains(c.Reason, "no drone for this route") ||
		len(c.Progress.Done) != 3 || c.Progress.Done[1] != delivery.StepPackage {
		t.Fatalf("decoded failure event %+v (err %v), want the request, its stage and reason, and the 3 steps done", c, err)
	}

	dead := readTopic(t, brokers, "dead", 2)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	if string(dead[0].Key) != "k-null" { // the failures of a batch may be written in either order
		dead[0], dead[1] = dead[1], dead[0]
	}
	for i, want := range []*kgo.Record{null, broken} {
		d := dead[i]
		if !bytes.Equal(d.Value, want.Value) || !bytes.Equal(d.Key, want.Key) || string(header(d, kafkasink.HeaderStage)) != "parse" ||
			header(d, kafkasink.HeaderReason) == nil || string(header(d, kafkasink.HeaderOffset)) != []string{"1", "2"}[i] {
			t.Errorf("dead letter %d: key %q value %q headers %v; want %q as it came, with its stage, reason and offset", i, d.Key, d.Value, d.Headers, want.Value)
		}
	}
	if string(header(dead[0], "origin")) != "x" {
		t.Errorf("dead letter of null lost its header: %v", dead[0].Headers)
	}
}

// An event written by an earlier scheduler (a JSON Compensation as its
// value) is read all the same.
func TestDecodeCompensationOfEarlierEvents(t *testing.T) {
	old, _ := json.Marshal(delivery.Compensation{Progress: delivery.Progress{Request: delivery.Request{ID: "r-1", Owner: "o"},
		Done: []delivery.Step{delivery.StepAccount}}, Stage: "create_package", Reason: "refused"})
	c, err := delivery.DecodeCompensation(old, func(string) []byte { return nil })
	if err != nil || c.Progress.Request.ID != "r-1" || c.Stage != "create_package" || len(c.Progress.Done) != 1 {
		t.Fatalf("earlier event: %+v, %v", c, err)
	}
	// A progress header that does not decode costs the detail, not the
	// compensation: the supervisor undoes every step whatever it says.
	req := requestRecord("failures", "r-2", "r-2").Value
	c, err = delivery.DecodeCompensation(req, func(k string) []byte {
		switch k {
		case delivery.HeaderProgress:
			return []byte("[")
		case kafkasink.HeaderReason:
			return []byte("refused")
		}
		return nil
	})
	if err != nil || c.Progress.Request.ID != "r-2" || !strings.Contains(c.Reason, "refused") || !strings.Contains(c.Reason, delivery.HeaderProgress) {
		t.Fatalf("a bad progress header: %+v, %v; want the request, with the reason saying the header is bad", c, err)
	}
}

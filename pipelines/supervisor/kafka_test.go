package supervisor_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// The topics of the end-to-end tests.
const (
	topicFailures = "delivery-failures"
	topicRetry    = "delivery-failures-retry"
	topicDead     = "delivery-compensation-dead-letters"
)

// position is where a record was written.
type position struct {
	partition int32
	offset    int64
}

// produceEvents writes a compensation event for each id to the failures
// topic, keyed by the id, with a header of its own (trace-id: trace-<id>),
// and returns what was written where. Every other event is in the form an
// earlier scheduler wrote (a JSON Compensation); the others as today's
// does (the request's record, its steps in delivery.HeaderProgress, the
// failure and the request's position in headers).
func produceEvents(t *testing.T, brokers []string, ids []string) (values map[string][]byte, at map[string]position) {
	t.Helper()
	cl := kafkaClient(t, brokers)
	values, at = map[string][]byte{}, map[string]position{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, id := range ids {
		v := compensationEvent(t, id)
		rec := &kgo.Record{Topic: topicFailures, Key: []byte(id), Value: v,
			Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("trace-" + id)}}}
		if i%2 == 1 {
			var ev delivery.Compensation
			if err := json.Unmarshal(v, &ev); err != nil {
				t.Fatal(err)
			}
			req, _ := json.Marshal(ev.Progress.Request)
			done, _ := json.Marshal(map[string]any{"done": ev.Progress.Done, "stage": ev.Stage, "reason": ev.Reason})
			rec.Value = req
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: delivery.HeaderProgress, Value: done},
				kgo.RecordHeader{Key: kafkasink.HeaderStage, Value: []byte(ev.Stage)},
				kgo.RecordHeader{Key: kafkasink.HeaderReason, Value: []byte(ev.Reason)},
				kgo.RecordHeader{Key: kafkasink.HeaderTopic, Value: []byte("delivery-requests")},
				kgo.RecordHeader{Key: kafkasink.HeaderPartition, Value: []byte("3")},
				kgo.RecordHeader{Key: kafkasink.HeaderOffset, Value: []byte("42")})
		}
		r, err := cl.ProduceSync(ctx, rec).First()
		if err != nil {
			t.Fatal(err)
		}
		values[id], at[id] = rec.Value, position{r.Partition, r.Offset}
	}
	return values, at
}

func kafkaClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// committed returns the group's committed offsets of topic by partition
// (nil if the coordinator did not answer: the caller polls again).
func committed(cl *kgo.Client, group, topic string) map[int32]int64 {
	return testenv.CommittedOffsets(context.Background(), cl, group, topic)
}

// ends returns the end offset (high watermark) of each partition of topic.
func ends(t *testing.T, cl *kgo.Client, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("end offset of %s/%d: %v", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// caughtUp reports whether the group committed every record of topic.
func caughtUp(t *testing.T, cl *kgo.Client, group, topic string, partitions int32) bool {
	c := committed(cl, group, topic)
	for p, end := range ends(t, cl, topic, partitions) {
		if end > 0 && c[p] < end {
			return false
		}
	}
	return true
}

// readAll returns every record of topic, from the start to its end now.
func readAll(t *testing.T, brokers []string, topic string, partitions int32) []*kgo.Record {
	t.Helper()
	probe := kafkaClient(t, brokers)
	want := ends(t, probe, topic, partitions)
	total := int64(0)
	for _, n := range want {
		total += n
	}
	var out []*kgo.Record
	if total == 0 {
		return out
	}
	cl := kafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of the %d records of %s", len(out), total, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// header returns the value of r's first header named key, or "".
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// refuser serves the delivery services, except that it answers a DELETE
// with the status that status gives for its path and the number of
// DELETEs of that path it saw before (0: serve it).
type refuser struct {
	next   http.Handler
	status func(path string, seen int) int

	mu   sync.Mutex
	seen map[string]int
}

func newRefuser(next http.Handler, status func(path string, seen int) int) *refuser {
	return &refuser{next: next, status: status, seen: map[string]int{}}
}

func (rf *refuser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		rf.mu.Lock()
		code := rf.status(r.URL.Path, rf.seen[r.URL.Path])
		rf.seen[r.URL.Path]++
		rf.mu.Unlock()
		if code != 0 {
			http.Error(w, "undo refused by the test", code)
			return
		}
	}
	rf.next.ServeHTTP(w, r)
}

// liveFor returns the ids for which any service still holds a record.
func liveFor(l *delivery.Ledger, ids []string) []string {
	var out []string
	for _, id := range ids {
		for _, svc := range []string{"packages", "drones", "deliveries"} {
			if l.Live(svc, id) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

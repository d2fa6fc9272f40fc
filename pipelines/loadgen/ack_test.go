package loadgen

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
)

func producer(t *testing.T, brokers ...string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// keysIn reads topic to its end: how many records it holds with each key.
func keysIn(t *testing.T, brokers []string, topic string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := map[string]int{}
	err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topic, time.Time{},
		func(r *kgo.Record) bool { keys[string(r.Key)]++; return true })
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A broker that does not answer, or a topic it does not have, stops Run
// before it sends anything, with an error naming them; nothing is
// recorded as sent. (Before, it produced into the client's buffer for the
// whole load, counted all of it as sent and failed 30 s later with
// "flushing: context deadline exceeded".)
func TestRunFailsFastWithoutBrokerOrTopic(t *testing.T) {
	addr := closedPort(t)
	brokers := testenv.Kfake(t, 2, "requests")
	for _, c := range []struct {
		name, broker, topic, want string
	}{
		{"no broker", addr, "requests", addr},
		{"no topic", brokers[0], "no-such-topic", `"no-such-topic"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent := NewSent()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := Run(ctx, producer(t, c.broker), Default(c.topic, 100, 2*time.Second), sent)
			if err == nil || !strings.Contains(err.Error(), c.want) || ctx.Err() != nil {
				t.Fatalf("Run = %v, want an error naming %s", err, c.want)
			}
			if kinds, _ := sent.Kinds(); sent.Total() != 0 || len(kinds) != 0 {
				t.Fatalf("%d requests recorded as sent (%d distinct), none reached a broker", sent.Total(), len(kinds))
			}
		})
	}
}

// Only what the broker acknowledged is recorded: once the broker refuses
// records, Run stops sending and fails naming the refusal, and the record
// holds exactly the requests the topic holds.
func TestRunRecordsOnlyAcknowledgedRequests(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var produces atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if produces.Add(1) <= 20 {
			return nil, nil, false
		}
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = tp.Topic, tp.TopicID
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	brokers := c.ListenAddrs()
	sent := NewSent()
	start := time.Now().Truncate(time.Millisecond)
	err = Run(context.Background(), producer(t, brokers...), Default("requests", 2000, 2*time.Second), sent)
	end := time.Now()
	if err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("Run = %v, want the refusal", err)
	}
	keys := keysIn(t, brokers, "requests")
	kinds, dups := sent.Kinds()
	held := 0
	for _, n := range keys {
		held += n
	}
	if len(kinds) == 0 || len(kinds) != len(keys) || held != int(sent.Total()) || held != len(kinds)+dups {
		t.Fatalf("recorded %d requests (%d records, %d duplicates); the topic holds %d (%d records)",
			len(kinds), sent.Total(), dups, len(keys), held)
	}
	for id := range kinds {
		if keys[id] == 0 {
			t.Fatalf("%s recorded as sent, not in the topic", id)
		}
		// When it was produced: the start of its end-to-end latency.
		if at := sent.SentAt(id); at.Before(start) || at.After(end) {
			t.Fatalf("%s recorded as sent at %v, not during the run (%v to %v)", id, at, start, end)
		}
	}
}

// A request the brokers never answer while Run waits is neither counted
// as sent nor dropped: it is recorded as unconfirmed, since the brokers
// may hold it — as they do here once they answer, after Run has given up.
func TestRunRecordsUnansweredRequestsAsUnconfirmed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for unanswered produce requests to time out: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	answer := make(chan struct{})
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-answer })
		return nil, nil, false // then written as usual
	})
	brokers := c.ListenAddrs()
	cfg := Default("requests", 500, 200*time.Millisecond)
	cfg.FlushTimeout = 300 * time.Millisecond
	sent := NewSent()
	err = Run(context.Background(), producer(t, brokers...), cfg, sent)
	close(answer)
	unconfirmed := sent.Unconfirmed()
	if err == nil || !strings.Contains(err.Error(), "unconfirmed") || len(unconfirmed) == 0 {
		t.Fatalf("Run = %v with %d unconfirmed, want an error counting them", err, len(unconfirmed))
	}
	if kinds, _ := sent.Kinds(); sent.Total() != 0 || len(kinds) != 0 {
		t.Fatalf("%d requests counted as sent, none was acknowledged", sent.Total())
	}
	// Some reached the topic; each of them is in the record. (Others the
	// client had not sent yet: unconfirmed too, since Run cannot tell
	// which.)
	keys := keysIn(t, brokers, "requests")
	if len(keys) == 0 {
		t.Fatal("no request reached the topic: the test shows nothing")
	}
	for id := range keys {
		if _, ok := unconfirmed[id]; !ok {
			t.Fatalf("%s in the topic, not recorded", id)
		}
	}
}

// A client that asks for no acknowledgement (RequiredAcks(NoAck)) hears
// nothing from the brokers: a produce succeeds once written to the
// connection, so Run would record as acknowledged requests the broker
// refused. Run refuses such a client before it sends anything.
func TestRunRefusesAClientThatWantsNoAcknowledgement(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return nil, errors.New("the broker takes nothing"), true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sent := NewSent()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Run(ctx, cl, Default("requests", 200, time.Second), sent)
	if kinds, _ := sent.Kinds(); err == nil || sent.Total() != 0 || len(kinds) != 0 {
		t.Fatalf("Run = %v with %d requests recorded as acknowledged; the broker took none", err, sent.Total())
	}
}

// lossyProducer acknowledges its first ok records and fails every later
// one as a connection lost after the write may have reached the server.
type lossyProducer struct {
	ok      int
	mu      sync.Mutex
	written []string
}

var errLostReply = errors.New("connection lost before the reply")

func (p *lossyProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	n := len(p.written)
	p.written = append(p.written, string(r.Key))
	p.mu.Unlock()
	if n < p.ok {
		promise(r, nil)
		return
	}
	promise(r, errLostReply)
}

func (p *lossyProducer) Flush(context.Context) error { return nil }

// A producer other than a Kafka client (a Redis stream's writer) may have
// written a record whose reply it lost: such a request is recorded as
// unconfirmed, not dropped, and the first failure stops the load with an
// error that names it.
func TestRunRecordsFailuresOfAnotherProducerAsUnconfirmed(t *testing.T) {
	p := &lossyProducer{ok: 50}
	cfg := Default("requests", 2000, 2*time.Second)
	cfg.Duplicate = 0
	sent := NewSent()
	err := Run(context.Background(), p, cfg, sent)
	if !errors.Is(err, errLostReply) || !strings.Contains(err.Error(), "unconfirmed") || !strings.Contains(err.Error(), "the server") {
		t.Fatalf("Run = %v, want the lost reply, the failed requests recorded as unconfirmed", err)
	}
	kinds, _ := sent.Kinds()
	unconfirmed := sent.Unconfirmed()
	if len(kinds) != 50 || sent.NotWritten() != 0 || len(unconfirmed) != len(p.written)-50 {
		t.Fatalf("recorded %d acknowledged, %d unconfirmed, %d not written; the producer acknowledged 50 of %d",
			len(kinds), len(unconfirmed), sent.NotWritten(), len(p.written))
	}
	for _, k := range p.written[:50] {
		if _, ok := kinds[k]; !ok {
			t.Fatalf("%s acknowledged, not recorded", k)
		}
	}
	for _, k := range p.written[50:] {
		if _, ok := unconfirmed[k]; !ok {
			t.Fatalf("%s failed, not recorded as unconfirmed", k)
		}
	}
}

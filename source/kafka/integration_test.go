//go:build kafka

package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

var topicSeq atomic.Int64

// realTopic creates a fresh topic on the real broker.
func realTopic(t *testing.T, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("it-%d-%s", topicSeq.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if err := testenv.CreateTopic([]string{testenv.Broker().Addr}, name, partitions); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestRealKafkaConsumesAndCommits(t *testing.T) {
	topic := realTopic(t, 4)
	brokers := []string{testenv.Broker().Addr}
	testenv.Produce(t, brokers, topic, 5000, func(i int) []byte { return fmt.Appendf(nil, "v%d", i) })
	committed := map[int32]int64{}
	seen := map[string]bool{}
	src := newSource(t, brokers, "it-"+topic, func(c *kafka.Config) {
		c.Topics = []string{topic}
		c.OnCommit = func(_ string, p int32, off int64) { committed[p] = off }
	})
	consume(t, src, 5000, func(m stream.Message[[]byte]) { seen[string(m.Value)] = true })
	var total int64
	for _, off := range committed {
		total += off
	}
	if len(seen) != 5000 || total != 5000 {
		t.Fatalf("%d distinct values, committed offsets add to %d; want 5000 and 5000", len(seen), total)
	}
}

func TestRealKafkaKcat(t *testing.T) {
	topic := realTopic(t, 1)
	testenv.Kcat(t, []byte("k1:hello\nk2:\n"), "-b", testenv.Broker().Addr, "-t", topic, "-P", "-K:", "-Z", "-H", "origin=kcat")
	// Matched by key: kcat may send the lines in separate batches and
	// retry one, so the log's order need not be the input's (one run read
	// k2 first).
	got := map[string]stream.Message[[]byte]{}
	consume(t, newSource(t, []string{testenv.Broker().Addr}, "it-"+topic, func(c *kafka.Config) { c.Topics = []string{topic} }), 2,
		func(m stream.Message[[]byte]) { got[string(m.Key)] = m })
	k1, k2 := got["k1"], got["k2"]
	if string(k1.Value) != "hello" || k2.Value != nil || string(k2.Header("origin")) != "kcat" {
		t.Fatalf("got k1 %q and k2 %v (headers %v)", k1.Value, k2.Value, k2.Headers)
	}
}

func TestRealKafkaCrashSafety(t *testing.T) {
	crashTest(t, []string{testenv.Broker().Addr}, realTopic(t, crashParts))
}

func TestRealKafkaRebalance(t *testing.T) {
	rebalanceTest(t, []string{testenv.Broker().Addr}, realTopic(t, crashParts))
}

func TestRealKafkaBadInput(t *testing.T) {
	ctx := context.Background()
	_, err := kafka.NewSource(ctx, kafka.Config{Conn: kafka.Conn{Brokers: []string{testenv.Broker().Addr}}, Group: "g",
		Topics: []string{"does-not-exist"}, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "does-not-exist") {
		t.Fatalf("unknown topic: %v", err)
	}
	t.Log(err)
	topic := realTopic(t, 1)
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: []string{testenv.Broker().SASLAddr}, ConnectTimeout: 10 * time.Second,
		SASL: &kafka.SASL{Mechanism: "PLAIN", User: testenv.SASLUser, Password: "wrong"}}, Group: "g", Topics: []string{topic}, Logger: quiet}
	_, err = kafka.NewSource(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("wrong SASL password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	t.Log(err)
	cfg.SASL.Password = testenv.SASLPassword
	src, err := kafka.NewSource(ctx, cfg)
	if err != nil {
		t.Fatalf("right SASL password: %v", err)
	}
	src.Close(ctx)
	// SASL against the plaintext listener: the broker answers
	// ILLEGAL_SASL_STATE, and the error says what that means.
	cfg.Brokers = []string{testenv.Broker().Addr}
	_, err = kafka.NewSource(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "ILLEGAL_SASL_STATE") || !strings.Contains(err.Error(), "does not speak SASL") {
		t.Fatalf("SASL against the plaintext listener: %v, want ILLEGAL_SASL_STATE with a hint", err)
	}
	t.Log(err)
}

// Members joining, leaving and crashing under a slow pipeline, against a
// real broker, with the eager range balancer (see churnTest).
func TestRealKafkaChurnRange(t *testing.T) {
	churnTest(t, []string{testenv.Broker().Addr}, realTopic(t, 8), 8, kgo.RangeBalancer(), 12*time.Second)
}

func TestRealKafkaChurnCooperative(t *testing.T) {
	churnTest(t, []string{testenv.Broker().Addr}, realTopic(t, 8), 8, kgo.CooperativeStickyBalancer(), 12*time.Second)
}

func TestRealKafkaWatchdogQuietDuringSlowJoin(t *testing.T) {
	watchdogDuringSlowJoin(t, []string{testenv.Broker().Addr}, realTopic(t, 2))
}

// The contract against a real broker, each check on a topic and group of
// its own. ReconnectsAfterServerRestart is left off here: the one broker is
// shared by the whole integration suite, and TestSourceContract restarts
// kfake for that check.
func TestRealKafkaSourceContract(t *testing.T) {
	brokers := []string{testenv.Broker().Addr}
	streamtest.TestSource(t, streamtest.SourceCase[[]byte]{
		New: func(t *testing.T, n int) stream.Source[[]byte] {
			topic := realTopic(t, 3)
			testenv.Produce(t, brokers, topic, n+100, indexValue(0))
			src := newSource(t, brokers, "it-"+topic, func(c *kafka.Config) { c.Topics = []string{topic} })
			t.Cleanup(func() { _ = src.Close(context.Background()) })
			return src
		},
		Index:    valueIndex,
		Features: streamtest.Features{OrderedPerPartition: true, ReplayAfterRestart: true, RedeliversUnsettled: true},
		Restart: func(t *testing.T) streamtest.RestartCase[[]byte] {
			topic := realTopic(t, 3)
			return streamtest.RestartCase[[]byte]{
				Produce: func(t *testing.T, first, n int) { testenv.Produce(t, brokers, topic, n, indexValue(first)) },
				NewSource: func(t *testing.T) streamtest.Resumable[[]byte] {
					return newSource(t, brokers, "it-"+topic, func(c *kafka.Config) { c.Topics = []string{topic} })
				},
			}
		},
	})
}

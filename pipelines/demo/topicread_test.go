package demo

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// A dead-letter topic is read to its end even when the broker is slow to
// answer its first fetches. (Found in TestWorkerProcessesSurviveSIGKILL on
// a loaded machine: the reader stopped at the first 300 ms without
// records, read the topic as empty, and the run was reported with
// thousands of requests lost and none dead-lettered.)
func TestReasonsReadTheWholeTopicOfASlowBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("reads through a broker slowed in real time: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topicDead, topicSupervisorDead))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const n = 50
	for i := range n {
		r := &kgo.Record{Topic: topicDead, Key: fmt.Appendf(nil, "d-%d", i),
			Headers: []kgo.RecordHeader{{Key: kafkasink.HeaderReason, Value: fmt.Appendf(nil, "reason %d", i)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var fetches atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if fetches.Add(1) <= 3 {
			c.SleepControl(func() { time.Sleep(time.Second) })
		}
		return nil, nil, false // answered as usual, late
	})
	got, err := reasons(KafkaReader(brokers), topicDead)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got["d-7"] != "reason 7" || fetches.Load() == 0 {
		t.Fatalf("read %d dead letters (d-7: %q) in %d fetches, want %d", len(got), got["d-7"], fetches.Load(), n)
	}
	if got, err := reasons(KafkaReader(brokers), topicSupervisorDead); err != nil || len(got) != 0 {
		t.Fatalf("an empty topic: %v %v", got, err)
	}
	if written, err := DeadLettersWritten(ctx, brokers); err != nil || written != n {
		t.Fatalf("DeadLettersWritten = %d, %v; want %d", written, err, n)
	}
	// The mark `sluice deadletters replay` leaves, keyed like the dead
	// letter it marks, is not a dead letter and does not hide its reason.
	got, _ = reasons(KafkaReader(brokers), topicDead)
	d := kafkasink.ReadDeadLetter(&kgo.Record{Topic: topicDead, Key: []byte("d-7"), Partition: 0, Offset: 3})
	if err := cl.ProduceSync(ctx, d.ReplayMarker("delivery-requests")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if after, err := reasons(KafkaReader(brokers), topicDead); err != nil || len(after) != len(got) || after["d-7"] != "reason 7" {
		t.Fatalf("after a replay mark: d-7 %q, %d dead letters (%v), want %d", after["d-7"], len(after), err, len(got))
	}
}

//go:build kafka

package sensors_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// realKafkaTopics creates, on the real broker of make test-kafka, a
// readings topic of 16 partitions and a dead-letter topic, both named
// after the test.
func realKafkaTopics(t *testing.T) (brokers []string, topic, deadLetters string) {
	t.Helper()
	brokers = []string{testenv.Broker().Addr}
	topic, deadLetters = "sensors-"+t.Name(), "sensors-dead-letters-"+t.Name()
	if err := testenv.CreateTopic(brokers, topic, 16); err != nil {
		t.Fatal(err)
	}
	if err := testenv.CreateTopic(brokers, deadLetters, 4); err != nil {
		t.Fatal(err)
	}
	return brokers, topic, deadLetters
}

// TestSensorsInstancesStopAndJoinWhileReadingsFlow on a real Apache Kafka
// broker: three instances share 16 partitions; one stops and a fourth
// joins while readings flow, a new kind of sensor raising the rate. Every
// home's every minute in Redis equals the recount of what was sent, and
// the malformed and late readings are on the dead-letter topic.
//
// The generator's simulated clock starts two hours back and runs for
// minutes: the broker refuses record timestamps more than an hour ahead
// of its clock, none from the past.
func TestRealKafkaSensorsInstancesStopAndJoinWhileReadingsFlow(t *testing.T) {
	brokers, topic, deadLetters := realKafkaTopics(t)
	rdb, store := testStore(t, testenv.Redis(t))
	gcfg := genConfig()
	gcfg.Topic = topic
	gcfg.AddKindAfter = 2 * time.Second
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	config := func(id string) sensors.Config {
		cfg := testConfig(brokers, rdb, id)
		cfg.Topic, cfg.DeadLetterTopic = topic, deadLetters
		return cfg
	}
	var ins []*instance
	for i := range 3 {
		ins = append(ins, startInstance(t, config(fmt.Sprintf("w%d", i+1))))
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, brokers, gen, 10) // 5 s
	}()
	time.Sleep(1500 * time.Millisecond)
	ins[1].close(t) // graceful: final checkpoints, partitions relinquished
	time.Sleep(1500 * time.Millisecond)
	ins = append(ins, startInstance(t, config("w4")))
	<-produced
	if t.Failed() {
		t.FailNow() // produce failed
	}
	if gen.Kinds() != 4 {
		t.Fatalf("kinds %d: the fourth was not added", gen.Kinds())
	}
	waitAtLogEnd(t, brokers, topic, ins[0].w.Owners(), 30*time.Second, func() string {
		var s string
		for i, in := range ins {
			if i != 1 {
				s += fmt.Sprintf("\nw%d: %+v", i+1, in.w.Stats())
			}
		}
		return s
	})
	for i, in := range ins {
		if i != 1 {
			in.close(t)
		}
	}
	verifyTopic(t, brokers, deadLetters, store, gen)
}

// TestSensorsWorkerProcessesSurviveSIGKILL on a real Apache Kafka broker.
func TestRealKafkaSensorsWorkerProcessesSurviveSIGKILL(t *testing.T) {
	brokers, topic, deadLetters := realKafkaTopics(t)
	workersSurviveSIGKILL(t, brokers, topic, deadLetters)
}

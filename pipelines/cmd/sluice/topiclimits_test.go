package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// A worker whose retry topic cannot hold the largest record it parks
// refuses to start, naming the topic, its max.message.bytes and what it
// needs, before it joins its group: started, it would park a request or a
// compensation it could not write, and stop at it again at every restart.
func TestWorkerRefusesARetryTopicTooSmallToPark(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "delivery-requests", "delivery-failures", "delivery-dead-letters",
		"delivery-requests-retry", "delivery-failures-retry", "delivery-compensation-dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	const small = 3 << 10
	needs := map[string]int{"delivery": delivery.MaxParkedRecord, "supervisor": supervisor.MaxParkedRecord}
	retry := map[string]string{"delivery": "delivery-requests-retry", "supervisor": "delivery-failures-retry"}
	for _, which := range []string{"delivery", "supervisor"} {
		testenv.SetMaxMessageBytes(t, brokers, retry[which], small)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := runWorker(ctx, []string{which, "-brokers", brokers[0], "-listen", "127.0.0.1:0", "-backends", "sim", "-log-level", "error"})
		cancel()
		t.Logf("%s: %v", which, err)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"`+retry[which]+`"`) ||
			!strings.Contains(err.Error(), "max.message.bytes "+strconv.Itoa(small)) || !strings.Contains(err.Error(), strconv.Itoa(needs[which])) {
			t.Errorf("%s worker with a retry topic of %d bytes: %v; want it refused at start, naming %s, its max.message.bytes "+
				"and the %d it needs", which, small, err, retry[which], needs[which])
		}
		if gi := c.GroupInfo("sluice-" + which); gi != nil {
			t.Errorf("%s joined its group (now %s) before it checked its retry topic", which, gi.State)
		}
	}
	// The scheduler's failures topic must hold any compensation event:
	// one refused there would stop the scheduler, again at every restart.
	testenv.SetMaxMessageBytes(t, brokers, "delivery-requests-retry", 1<<20)
	testenv.SetMaxMessageBytes(t, brokers, "delivery-failures", 32<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = runWorker(ctx, []string{"delivery", "-brokers", brokers[0], "-listen", "127.0.0.1:0", "-backends", "sim", "-log-level", "error"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"delivery-failures"`) ||
		!strings.Contains(err.Error(), strconv.Itoa(delivery.MaxEventRecord)) {
		t.Errorf("delivery worker with a failures topic of 32 KiB: %v; want it refused at start, naming the topic and the %d it needs",
			err, delivery.MaxEventRecord)
	}
}

// The worker's producer makes record batches no larger than each topic's
// max.message.bytes, so that a topic below franz-go's default batch size
// (1,000,012 bytes) does not refuse them whole; a topic it has not read
// keeps the default.
func TestWorkerBatchesFitItsTopics(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry", "dead", "failures")
	testenv.SetMaxMessageBytes(t, brokers, "retry", 20<<10)
	testenv.SetMaxMessageBytes(t, brokers, "dead", 100)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var l topicLimits
	if got := l.batchMax("retry"); got != defaultBatchMax {
		t.Fatalf("batch limit before the check: %d, want franz-go's default", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.check(ctx, cl, "delivery", "retry", "failures", []string{"dead", "failures"}); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int32{"retry": 20 << 10, "dead": 512, "failures": 1048588, "other": defaultBatchMax} {
		if got := l.batchMax(topic); got != want {
			t.Errorf("batch limit of %s: %d, want %d", topic, got, want)
		}
	}
}

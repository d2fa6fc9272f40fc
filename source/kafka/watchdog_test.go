package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
)

// A member waiting in a JoinGroup hears nothing from the coordinator until
// every other member has rejoined, up to the largest rebalance timeout in
// the group (60 s by default, often minutes), while the cluster answers
// everyone else. That silence is not a lost broker: the watchdog must not
// end Run, nor Ready report the broker unreachable.
//
// Member B is slow to rejoin (it holds a poll, as a consumer busy with a
// batch does, for 4 s); A (MaxBrokerLoss 1 s, heartbeat 100 ms) joins
// meanwhile and must wait for B. (Found in review.)
func TestWatchdogQuietDuringSlowJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a group join for seconds: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, "in"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	watchdogDuringSlowJoin(t, brokers, "in")
}

func watchdogDuringSlowJoin(t *testing.T, brokers []string, topic string) {
	testenv.Produce(t, brokers, topic, 100, func(i int) []byte { return strconv.AppendInt(nil, int64(i), 10) })
	group := "slowjoin-" + topic

	// B: an ordinary consumer that blocks rebalances while it works on a
	// poll for 4 s, then allows them and goes on.
	b, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.BlockRebalanceOnPoll(), kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10*time.Second), kgo.RebalanceTimeout(10*time.Second), kgo.HeartbeatInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(bdone)
		once := false
		for bctx.Err() == nil {
			fs := b.PollFetches(bctx)
			if !once && fs.NumRecords() > 0 {
				once = true
				close(first)
				select { // busy with this poll: rebalances wait
				case <-time.After(4 * time.Second):
				case <-bctx.Done():
				}
			}
			b.AllowRebalance()
		}
	}()
	defer func() { bcancel(); <-bdone; b.Close() }()
	<-first

	src := newSource(t, brokers, group, func(c *kafka.Config) {
		c.Topics = []string{topic}
		c.Balancer = kgo.RangeBalancer()
		c.MaxBrokerLoss = time.Second
		c.Opts = append(c.Opts, kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(10*time.Second))
	})
	m := startOutageMember(t, src)
	var runErr error
	select {
	case runErr = <-m.done:
	case <-time.After(8 * time.Second):
		m.cancel()
		runErr = <-m.done
	}
	_ = src.Close(context.Background())
	if errors.Is(runErr, kafka.ErrBrokerLost) {
		t.Fatalf("Run ended while the broker answered all along (B's heartbeats and polls): %v", runErr)
	}
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
}

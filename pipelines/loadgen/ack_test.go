package loadgen

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
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

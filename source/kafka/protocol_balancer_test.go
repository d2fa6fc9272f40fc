package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
)

// loggedBalancer is a balancer a user wraps around franz-go's range
// balancer (to log plans, say): its protocol name is still "range".
type loggedBalancer struct{ kgo.GroupBalancer }

// A balancer that Validate accepts under ProtocolConsumer must give a
// group of the consumer protocol: Validate tells sticky and range apart by
// protocol name, but franz-go looks at the balancer's type and silently
// joins with the classic protocol for any other, so a wrapped range
// balancer is accepted and the group is classic.
func TestConsumerProtocolAcceptsOnlyBalancersThatJoinIt(t *testing.T) {
	brokers := testenv.Kfake(t, 4, "in")
	testenv.Produce(t, brokers, "in", 100, func(i int) []byte { return fmt.Appendf(nil, "v%d", i) })
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "wrapped", Topics: []string{"in"}, Logger: quiet,
		Protocol: kafka.ProtocolConsumer, Balancer: loggedBalancer{kgo.RangeBalancer()}}
	if err := cfg.Validate(); err != nil {
		return // refused: what the docs promise for a balancer the broker cannot stand in for
	}
	src := newSource(t, brokers, "wrapped", func(c *kafka.Config) {
		c.Protocol, c.Balancer = kafka.ProtocolConsumer, loggedBalancer{kgo.RangeBalancer()}
	})
	consume(t, src, 100, nil)
	for _, g := range listGroups(t, brokers) {
		if g.Group == "wrapped" && g.GroupType != "consumer" {
			t.Fatalf("Validate accepted Protocol: ProtocolConsumer with a balancer named %q, and the group was joined with the %q protocol",
				cfg.Balancer.ProtocolName(), g.GroupType)
		}
	}
}

// A kgo.Balancers option in Opts overrides Balancer: NewSource refuses one
// that would make a ProtocolConsumer group join with the classic protocol.
func TestConsumerProtocolRefusesABalancerOverriddenInOpts(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	cfg := kafka.Config{Conn: kafka.Conn{Brokers: brokers}, Group: "wrapped-opts", Topics: []string{"in"}, Logger: quiet,
		Protocol: kafka.ProtocolConsumer, Opts: []kgo.Opt{kgo.Balancers(loggedBalancer{kgo.RangeBalancer()})}}
	src, err := kafka.NewSource(context.Background(), cfg)
	if err == nil {
		src.Close(context.Background())
		t.Fatal("NewSource accepted Opts overriding Balancer with a wrapped range balancer under ProtocolConsumer")
	}
	if !errors.Is(err, kafka.ErrConfig) || !strings.Contains(err.Error(), "Opts") {
		t.Fatalf("got %v, want an ErrConfig naming Opts", err)
	}
}

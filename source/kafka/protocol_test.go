package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A source configured with ProtocolConsumer joins its group with the
// consumer protocol (the broker lists the group as of type "consumer"),
// consumes and commits.
func TestConsumerProtocolJoinsAConsumerGroup(t *testing.T) {
	brokers := testenv.Kfake(t, 4, "in")
	testenv.Produce(t, brokers, "in", 1000, func(i int) []byte { return fmt.Appendf(nil, "v%d", i) })
	committed := map[int32]int64{}
	src := newSource(t, brokers, "kip848", func(c *kafka.Config) {
		c.Protocol = kafka.ProtocolConsumer
		c.OnCommit = func(_ string, p int32, off int64) { committed[p] = off }
	})
	consume(t, src, 1000, nil)
	var total int64
	for _, off := range committed {
		total += off
	}
	if total != 1000 {
		t.Fatalf("committed offsets add to %d, want 1000", total)
	}
	var types []string
	for _, g := range listGroups(t, brokers) {
		if g.Group == "kip848" {
			types = append(types, g.GroupType)
		}
	}
	if len(types) != 1 || types[0] != "consumer" {
		t.Fatalf("group kip848 listed with types %v, want [consumer]", types)
	}
}

// listGroups lists the groups the brokers know, with their protocols.
func listGroups(t *testing.T, brokers []string) []kmsg.ListGroupsResponseGroup {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Groups
}

// Under the consumer protocol the broker assigns: a client-side balancer
// the broker has no assignor for would be ignored by franz-go (which then
// joins with the classic protocol), so it is a configuration error.
func TestConsumerProtocolRefusesAClientSideBalancer(t *testing.T) {
	base := kafka.Config{Conn: kafka.Conn{Brokers: []string{"localhost:9092"}}, Group: "g", Topics: []string{"in"}}
	for _, tc := range []struct {
		name  string
		cfg   func(c *kafka.Config)
		field string // "" when valid
	}{
		{"default balancer", func(c *kafka.Config) { c.Protocol = kafka.ProtocolConsumer }, ""},
		{"sticky", func(c *kafka.Config) { c.Protocol, c.Balancer = kafka.ProtocolConsumer, kgo.StickyBalancer() }, ""},
		{"range", func(c *kafka.Config) { c.Protocol, c.Balancer = kafka.ProtocolConsumer, kgo.RangeBalancer() }, ""},
		{"round robin", func(c *kafka.Config) { c.Protocol, c.Balancer = kafka.ProtocolConsumer, kgo.RoundRobinBalancer() }, "Balancer"},
		{"round robin, classic", func(c *kafka.Config) { c.Balancer = kgo.RoundRobinBalancer() }, ""},
		{"unknown protocol", func(c *kafka.Config) { c.Protocol = 7 }, "Protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.cfg(&c)
			err := c.Validate()
			var ce *stream.ConfigError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Argument != tc.field || !errors.Is(err, kafka.ErrConfig)):
				t.Fatalf("Validate = %v, want a configuration error of %s", err, tc.field)
			}
		})
	}
}

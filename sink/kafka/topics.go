package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MaxMessageBytes asks the cluster cl talks to for each topic's
// max.message.bytes: the largest record batch the topic accepts (its own
// setting, else the broker's message.max.bytes). A producer whose batches
// may be larger has them refused whole (see the package doc): give it
// these limits with kgo.ProducerBatchMaxBytesFn. A worker can also check at
// start that a topic holds the largest record it will write there. A
// topic the cluster does not know, or whose limit it does not say, is an
// error naming it.
func MaxMessageBytes(ctx context.Context, cl *kgo.Client, topics ...string) (map[string]int32, error) {
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("sluice: kafka: describing topics %v: %w", topics, err)
	}
	limits := make(map[string]int32, len(topics))
	var errs []error
	for _, t := range topics {
		rc, err := rcs.On(t, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sluice: kafka: topic %q: its configuration: %w", t, err))
			continue
		}
		n, err := maxMessageBytes(rc)
		if err != nil {
			errs = append(errs, fmt.Errorf("sluice: kafka: topic %q: %w", t, err))
			continue
		}
		limits[t] = n
	}
	return limits, errors.Join(errs...)
}

// maxMessageBytes is the topic's max.message.bytes as rc says it: its own
// setting, else the broker's message.max.bytes. Kafka answers the broker's
// as the topic's value (with the broker's as its synonym); kfake lists the
// broker's beside the topic's default instead, so that is read too.
func maxMessageBytes(rc kadm.ResourceConfig) (int32, error) {
	var topic, broker *string
	for _, c := range rc.Configs {
		switch c.Key {
		case "max.message.bytes":
			topic = c.Value
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				return parseMaxMessageBytes(c.Value)
			}
			for _, syn := range c.Synonyms {
				if syn.Key == "message.max.bytes" && syn.Source != kmsg.ConfigSourceDefaultConfig && broker == nil {
					broker = syn.Value
				}
			}
		case "message.max.bytes":
			if c.Source != kmsg.ConfigSourceDefaultConfig {
				broker = c.Value
			}
		}
	}
	if broker != nil {
		return parseMaxMessageBytes(broker)
	}
	return parseMaxMessageBytes(topic)
}

func parseMaxMessageBytes(v *string) (int32, error) {
	if v == nil {
		return 0, errors.New("the cluster does not say its max.message.bytes")
	}
	n, err := strconv.ParseInt(*v, 10, 32)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("max.message.bytes %q is not a positive 32-bit number", *v)
	}
	return int32(n), nil
}

package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (s *Source) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	if !s.cfg.Regex {
		for _, t := range s.cfg.Topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		var kerrErr *kerr.Error
		if errors.As(err, &kerrErr) {
			// The broker answered with an error (authentication, ACLs).
			return fmt.Errorf("sluice: kafka source: brokers %v: %w%s", s.cfg.Brokers, err, saslHint(err))
		}
		hint := ""
		if s.cfg.SASL != nil && errors.Is(err, io.EOF) {
			hint = " (SASL is configured: a broker that closes the connection right after connecting usually rejected the credentials, or its listener does not speak SASL)"
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: brokers %v did not answer within %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, s.cfg.ConnectTimeout, err, hint)
		}
		return fmt.Errorf("%w: brokers %v: %w%s", ErrBrokerUnreachable, s.cfg.Brokers, err, hint)
	}
	if s.cfg.Regex {
		return nil
	}
	return unknownTopics(resp, s.cfg.Brokers)
}

// saslHint explains the error a listener without SASL gives a client
// that starts a SASL handshake.
func saslHint(err error) string {
	if errors.Is(err, kerr.IllegalSaslState) {
		return " (SASL is configured, and this listener probably does not speak SASL: check the port and its " +
			"security protocol, or connect without -sasl-mechanism)"
	}
	return ""
}

// unknownTopics returns the errors of a metadata response's topics: an
// error wrapping ErrUnknownTopic for each that does not exist.
func unknownTopics(resp *kmsg.MetadataResponse, brokers []string) error {
	var errs []error
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				errs = append(errs, fmt.Errorf("%w %q on brokers %v", ErrUnknownTopic, name, brokers))
				continue
			}
			errs = append(errs, fmt.Errorf("sluice: kafka: topic %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// CheckTopics asks the cluster cl talks to whether the topics exist, for
// the topics a pipeline writes to (dead letters, failure queues): checked
// at start, a missing one is a clear error before any input is read, not a
// stop at the first message that goes there. A missing topic is an error
// wrapping ErrUnknownTopic that names it; ctx bounds the request.
func CheckTopics(ctx context.Context, cl *kgo.Client, topics ...string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("sluice: kafka: checking topics %v: %w%s", topics, err, saslHint(err))
	}
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	return unknownTopics(resp, seeds)
}

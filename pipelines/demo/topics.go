package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// The demo's topics: the scheduler reads topicLevels (one topic per level
// of priority, highest first, through its priority source) and writes
// compensation events to topicFailures and bad requests to topicDead.
const (
	topicFailures = "delivery-failures"
	topicDead     = "delivery-dead-letters"
	// The scheduler parks requests whose transient failures outlasted
	// their retries on topicParked and replays them from there.
	topicParked = "delivery-requests-retry"
	// The supervisor parks compensations it cannot do now on topicRetry
	// and dead-letters those it never can on topicSupervisorDead.
	topicRetry          = "delivery-failures-retry"
	topicSupervisorDead = "delivery-compensation-dead-letters"
)

// topicLevels are the requests' topics, one per level of priority, highest
// first: the load generator writes each request to its level's.
var topicLevels = [delivery.Levels]string{"delivery-requests-high", "delivery-requests-normal", "delivery-requests-low"}

// The scheduler and the supervisor replay a parked request or compensation
// after replayAfter, doubling up to maxReplayDelay: a demo lasts seconds,
// not the minutes a deployment gives a service to come back.
// A drone booking left unanswered (a crash mid-call, a timeout) is looked
// up at the drone service after staleAfter: the least the scheduler's
// retry policy allows (4 × its longest attempt timeout, 1 s: on a
// saturated machine the simulated services' answers, milliseconds
// otherwise, take that long).
const (
	replayAfter    = 500 * time.Millisecond
	maxReplayDelay = 4 * time.Second
	staleAfter     = 4 * time.Second
)

// createTopics creates the topics that do not exist yet.
func createTopics(ctx context.Context, brokers []string, topics map[string]int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	for name, parts := range topics {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, parts, -1
		req.Topics = append(req.Topics, t)
	}
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	resp, err := req.RequestWith(cctx, cl)
	if err != nil {
		return fmt.Errorf("creating topics on %v: %w", brokers, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", t.Topic, err)
		}
	}
	return nil
}

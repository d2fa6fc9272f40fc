package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/source/kafka"
)

// prepareKafka opens the producer and checks the cluster and every topic
// the worker reads and writes, sizing the producer's batches to them.
func (w *worker) prepareKafka(ctx context.Context) error {
	f := w.f
	var limits topicLimits
	producer, err := kgo.NewClient(append(f.cf.conn().ClientOpts(), kgo.WithLogger(kafka.NewLogger(f.logger)),
		kgo.ProducerBatchMaxBytesFn(limits.batchMax))...)
	if err != nil {
		return err
	}
	w.producer = producer
	w.closers = append(w.closers, producer.Close)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, producer, append(append(f.inputs, f.rf.retryTopic), f.outputs...)...)
	if err == nil {
		err = limits.check(cctx, producer, f.which, f.rf.retryTopic, f.failures, f.outputs)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("the %s worker's topics: %w", f.which, err)
	}
	return nil
}

// joinKafka joins the Kafka consumer groups: the input's, one per level
// of priority with -level-topics, and the replays'. Closing the worker
// closes the sources (their last commit) and, for a failed static member,
// leaves the groups.
func (w *worker) joinKafka(ctx context.Context) error {
	f := w.f
	groupOpts := func(suffix string) []kgo.Opt {
		opts := []kgo.Opt{kgo.SessionTimeout(f.session), kgo.HeartbeatInterval(max(100*time.Millisecond, f.session/10))}
		if f.instance != "" {
			opts = append(opts, kgo.InstanceID(f.instance+suffix))
		}
		return opts
	}
	members := &membership{cl: w.producer.(*kgo.Client), logger: f.logger, instance: f.instance}
	w.closers = append(w.closers, func() { members.close() })
	w.leave = func(failed bool) error {
		members.leave = failed
		return members.close()
	}
	for l, topic := range f.inputs {
		grp, suffix := f.levelGroup(l, len(f.inputs))
		s, err := kafka.NewSource(ctx, kafka.Config{Conn: f.cf.conn(), Group: grp, Topics: []string{topic}, Logger: f.logger, Opts: groupOpts(suffix)})
		if err != nil {
			return err
		}
		members.add(s, grp, suffix)
		w.srcs = append(w.srcs, s)
	}
	replayGroup := f.replayGroup()
	replay, err := kafka.NewSource(ctx, kafka.Config{Conn: f.cf.conn(), Group: replayGroup, Topics: []string{f.rf.retryTopic},
		Logger: f.logger, Opts: groupOpts("-replay")})
	if err != nil {
		return fmt.Errorf("the %s worker's retry topic: %w", f.which, err)
	}
	members.add(replay, replayGroup, "-replay")
	w.replay = replay
	return nil
}

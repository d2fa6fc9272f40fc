package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/sink/redisstream"
	redissource "github.com/sluice-streams/sluice/source/redisstream"
)

// prepareStreams opens the client of the streams (-transport redis) and
// the producer that appends the worker's records to them, and checks
// that the server answers (its address, password and certificate).
// Streams need not exist beforehand: a consumer group creates its stream,
// the first record written creates the others.
func (w *worker) prepareStreams(ctx context.Context) error {
	f := w.f
	opts := *f.ropts // a client of its own: the sources' blocking reads hold its connections, not the step records'
	w.streams = redis.NewClient(&opts)
	w.closers = append(w.closers, func() { w.streams.Close() })
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := w.streams.Ping(cctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("the %s worker's streams: %w", f.which, explainRedis(err, f.ropts))
	}
	p := redisstream.NewProducer(w.streams)
	w.producer = p
	w.closers = append(w.closers, p.Close)
	return nil
}

// joinStreams joins the consumer groups of the streams, creating those
// missing (a new group reads its stream from the start): the input's,
// one per level of priority with -level-topics, and the replays'. The
// worker is -consumer in each. Its entries read and not settled stay
// pending when it stops: it reads them again when it comes back under
// the same name, the others take them over once they have waited
// -reclaim-after. An entry delivered too many times, or with no value,
// goes to the worker's dead letters.
func (w *worker) joinStreams(ctx context.Context) error {
	f := w.f
	dead := f.dead
	if f.which == "supervisor" {
		dead = f.rf.deadLetterTopic
	}
	open := func(group, name string) (*redissource.Source, error) {
		s, err := redissource.New(ctx, redissource.Config{Client: w.streams, Streams: []string{name}, Group: group,
			Consumer: f.consumer, Create: true, MinIdle: f.reclaimAfter, DeadLetter: dead, Logger: f.logger})
		if err != nil {
			return nil, fmt.Errorf("the %s worker's stream %s (group %s): %w", f.which, name, group, err)
		}
		return s, nil
	}
	for l, name := range f.inputs {
		group, _ := f.levelGroup(l, len(f.inputs))
		s, err := open(group, name)
		if err != nil {
			return err
		}
		w.srcs = append(w.srcs, s)
	}
	replay, err := open(f.replayGroup(), f.rf.retryTopic)
	if err != nil {
		return err
	}
	w.replay = replay
	return nil
}

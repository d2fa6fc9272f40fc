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
	reads := make([]groupRead, 0, len(f.inputs)+1)
	for l, name := range f.inputs {
		group, _ := f.levelGroup(l, len(f.inputs))
		reads = append(reads, groupRead{name, group})
	}
	reads = append(reads, groupRead{f.rf.retryTopic, f.replayGroup()})
	w.warnIfNameInUse(ctx, reads, time.Second+time.Second/2)
	for i, r := range reads {
		s, err := open(r.group, r.stream)
		if err != nil {
			return err
		}
		if i < len(f.inputs) {
			w.srcs = append(w.srcs, s)
		} else {
			w.replay = s
		}
	}
	return nil
}

// groupRead is a stream a worker reads and the consumer group it reads it
// in.
type groupRead struct{ stream, group string }

// recentlyActive is how recently a consumer of the worker's name must have
// read for warnIfNameInUse to watch it.
const recentlyActive = 30 * time.Second

// warnIfNameInUse warns when another worker seems to be running under
// this one's -consumer name in one of its groups: two workers of one name
// share their pending entries, each re-reading what the other is working
// on. A consumer of the name that read within recentlyActive is watched
// for watch: a live one that is given entries reads again, its idle time
// starts over; a dead one's (this worker's own last life, killed) only
// grows. Best effort, never fatal: a server that does not report idle
// times (0) says nothing, and Redis 7.0 does not start the idle time over
// for a read that returns nothing, so a live worker on an empty stream
// looks idle and goes unnoticed.
func (w *worker) warnIfNameInUse(ctx context.Context, reads []groupRead, watch time.Duration) {
	f := w.f
	idle := func() map[groupRead]time.Duration {
		out := map[groupRead]time.Duration{}
		for _, r := range reads {
			cs, err := w.streams.XInfoConsumers(ctx, r.stream, r.group).Result()
			if err != nil { // no stream or group yet: no one of the name
				continue
			}
			for _, c := range cs {
				if c.Name == f.consumer && c.Idle < recentlyActive {
					out[r] = c.Idle
				}
			}
		}
		return out
	}
	before := idle()
	if len(before) == 0 {
		return
	}
	select {
	case <-time.After(watch):
	case <-ctx.Done():
		return
	}
	for r, now := range idle() {
		if then, ok := before[r]; ok && (then > 0 || now > 0) && now < then+watch/2 {
			f.logger.Warn("another worker seems to run under this worker's consumer name: give each worker its own -consumer, "+
				"or they re-read each other's pending entries", "consumer", f.consumer, "stream", r.stream, "group", r.group,
				"read_ago", now.Round(time.Millisecond))
		}
	}
}

package demo

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	sinkredis "github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// Each incarnation of the workers is a consumer of its groups of its own,
// "demo-1", "demo-2", ...: what a crashed one had read and not settled
// is taken over by the next once idle for reclaimAfter (a live
// incarnation renews its own entries, however long they take). The demo
// does not restart one under the name of the one before, which would
// take its pending entries back at once: the embedded Redis (miniredis)
// does not page through a pending list (an XPENDING range from an
// exclusive "(id" is refused).
// A run without restarts keeps the source's default (30 s): a live
// source renews its entries every MinIdle/3, calls that would slow the
// embedded server for nothing.
const reclaimAfter = 2 * time.Second

// redisInput is a Redis stream's source, reading the stream in group.
type redisInput struct {
	*redisstream.Source
	rc            *redis.Client
	stream, group string

	mu      sync.Mutex
	lagAt   time.Time
	lastLag int64
}

// maxCountedLag bounds the entries behind counts one by one, where the
// server does not count them.
const maxCountedLag = 10_000

// behind asks Redis how many entries the group has not been delivered
// yet (XINFO GROUPS; the source's own figure is as of its last look, up
// to seconds old), at most every 250 ms. Where the server does not know
// how many it has read (entries-read null: miniredis, whose lag is the
// stream's length), it counts those after the last delivered, up to
// maxCountedLag.
func (r *redisInput) behind() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lagAt) < 250*time.Millisecond {
		return r.lastLag
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	groups, err := r.rc.XInfoGroups(ctx, r.stream).Result()
	if err != nil {
		return r.lastLag
	}
	for _, g := range groups {
		if g.Name != r.group {
			continue
		}
		lag := max(g.Lag, 0)
		if g.EntriesRead == 0 && lag > 0 {
			n, err := r.rc.XRangeN(ctx, r.stream, "("+g.LastDeliveredID, "+", maxCountedLag).Result()
			if err != nil {
				return r.lastLag
			}
			lag = int64(len(n))
		}
		r.lagAt, r.lastLag = time.Now(), lag
	}
	return r.lastLag
}

func (r *redisInput) records() int64 {
	var n int64
	for _, s := range r.Stats().Streams {
		n += s.Read
	}
	return n
}

// stop acknowledges what is settled and stops renewing the entries its
// pipeline left unsettled (a crash): the next incarnation takes them over.
func (r *redisInput) stop() { _ = r.Close(context.Background()) }

// startStreams connects to the Redis server whose streams carry the
// topics (TransportRedis), starting the embedded one if cfg.Redis asks for
// it. A stream comes to be with its consumer group, or its first record.
func startStreams(ctx context.Context, cfg *Config, w io.Writer, cl *cleanups) (*transport, error) {
	if err := startEmbeddedRedis(cfg, w, cl); err != nil {
		return nil, err
	}
	// Each source's blocking read holds a connection: six an incarnation,
	// twelve while one takes over from another.
	rc := cfg.redisClient()
	cl.add(func() { _ = rc.Close() })
	if err := rc.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", cfg.Redis, err)
	}
	producer := sinkredis.NewProducer(rc)
	cl.add(producer.Close)
	fmt.Fprintf(w, "transport: Redis streams on %s, a consumer group each\n", cfg.Redis)
	var minIdle time.Duration // the source's default
	if cfg.Restarts > 0 {
		minIdle = reclaimAfter
	}
	open := func(ctx context.Context, group, topic string, life int) (input, error) {
		// An entry delivered too many times, or without a value, goes to
		// the dead letters of the worker that reads it.
		dead := topicDead
		if topic == topicFailures || topic == topicRetry {
			dead = topicSupervisorDead
		}
		s, err := redisstream.New(ctx, redisstream.Config{Client: rc, Streams: []string{topic}, Group: group,
			Consumer: fmt.Sprintf("demo-%d", life), Create: true, MinIdle: minIdle, DeadLetter: dead, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		return &redisInput{Source: s, rc: rc, stream: topic, group: group}, nil
	}
	return &transport{name: TransportRedis, producer: producer, open: open, verify: []VerifyOption{ReadFrom(RedisReader(rc))}}, nil
}

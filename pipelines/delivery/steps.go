package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// StepStore keeps a durable record of the steps each request completed,
// for backends that cannot be made idempotent: a replayed request reads it
// and skips what was done (mode b of seed 002; mode a, PUT by delivery id,
// needs none).
type StepStore interface {
	// Done returns the steps completed for a request, with the value each
	// recorded (the drone id of schedule_drone).
	Done(ctx context.Context, id string) (map[Step]string, error)
	// Record notes that a request completed a step.
	Record(ctx context.Context, id string, step Step, value string) error
}

// RedisSteps is a StepStore in Redis: one hash per request
// ("sluice:steps:<id>", field = step), expiring after TTL. Records from
// concurrent requests are written in batches, one pipeline per batch, so
// that a step costs a fraction of a round trip.
type RedisSteps struct {
	cl   redis.UniversalClient
	ttl  time.Duration
	reqs chan stepWrite
	stop chan struct{}
	done chan struct{}
}

type stepWrite struct {
	id, value string
	step      Step
	err       chan error
}

// NewRedisSteps returns a step store on cl whose records live for ttl
// (default 24h: longer than any replay). Close it when done.
func NewRedisSteps(cl redis.UniversalClient, ttl time.Duration) *RedisSteps {
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	s := &RedisSteps{cl: cl, ttl: ttl, reqs: make(chan stepWrite, 1024), stop: make(chan struct{}), done: make(chan struct{})}
	go s.writer()
	return s
}

func key(id string) string { return "sluice:steps:" + id }

// Done reads the request's record.
func (s *RedisSteps) Done(ctx context.Context, id string) (map[Step]string, error) {
	m, err := s.cl.HGetAll(ctx, key(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("reading step record of %s: %w", id, err)
	}
	out := make(map[Step]string, len(m))
	for k, v := range m {
		out[Step(k)] = v
	}
	return out, nil
}

// Record queues the write and waits until the batch holding it is
// written.
func (s *RedisSteps) Record(ctx context.Context, id string, step Step, value string) error {
	w := stepWrite{id: id, step: step, value: value, err: make(chan error, 1)}
	select {
	case s.reqs <- w:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return fmt.Errorf("step store closed")
	}
	select {
	case err := <-w.err:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writer takes whatever writes are waiting (up to 512) and sends them in
// one pipeline: HSET and EXPIRE per request.
func (s *RedisSteps) writer() {
	defer close(s.done)
	batch := make([]stepWrite, 0, 512)
	for {
		select {
		case w := <-s.reqs:
			batch = append(batch[:0], w)
		case <-s.stop:
			return
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case w := <-s.reqs:
				batch = append(batch, w)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, w := range batch {
				p.HSet(ctx, key(w.id), string(w.step), w.value)
				p.Expire(ctx, key(w.id), s.ttl)
			}
			return nil
		})
		cancel()
		if err != nil {
			err = fmt.Errorf("writing %d step records: %w", len(batch), err)
		}
		for _, w := range batch {
			w.err <- err
		}
	}
}

// Close stops the writer; pending Records fail.
func (s *RedisSteps) Close() {
	close(s.stop)
	<-s.done
}

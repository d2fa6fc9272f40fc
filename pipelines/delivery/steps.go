package delivery

import (
	"context"
	"errors"
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
// ("sluice:steps:<id>", field = step), expiring after TTL. Reads and writes
// from concurrent requests are batched: whatever is waiting goes in one
// pipeline, one round trip, so that a step costs a fraction of one.
type RedisSteps struct {
	cl   redis.UniversalClient
	ttl  time.Duration
	ops  chan *stepOp
	stop chan struct{}
	done chan struct{}
}

// stepOp is one read (HGETALL) or write (HSET + EXPIRE) waiting for its
// batch.
type stepOp struct {
	id, value string
	step      Step // "" for a read
	read      *redis.MapStringStringCmd
	err       chan error
}

// NewRedisSteps returns a step store on cl whose records live for ttl
// (default 24h: longer than any replay). Close it when done.
func NewRedisSteps(cl redis.UniversalClient, ttl time.Duration) *RedisSteps {
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	s := &RedisSteps{cl: cl, ttl: ttl, ops: make(chan *stepOp, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func key(id string) string { return "sluice:steps:" + id }

// Done reads the request's record.
func (s *RedisSteps) Done(ctx context.Context, id string) (map[Step]string, error) {
	op := &stepOp{id: id}
	if err := s.do(ctx, op); err != nil {
		return nil, fmt.Errorf("reading step record of %s: %w", id, err)
	}
	m := op.read.Val()
	out := make(map[Step]string, len(m))
	for k, v := range m {
		out[Step(k)] = v
	}
	return out, nil
}

// Record writes that a request completed a step, and returns once the
// batch holding the write is written.
func (s *RedisSteps) Record(ctx context.Context, id string, step Step, value string) error {
	return s.do(ctx, &stepOp{id: id, step: step, value: value})
}

// do queues op and waits for its batch.
func (s *RedisSteps) do(ctx context.Context, op *stepOp) error {
	op.err = make(chan error, 1)
	select {
	case s.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return fmt.Errorf("step store closed")
	}
	select {
	case err := <-op.err:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run takes whatever operations are waiting (up to 1024) and sends them in
// one pipeline.
func (s *RedisSteps) run() {
	defer close(s.done)
	batch := make([]*stepOp, 0, 1024)
	for {
		select {
		case op := <-s.ops:
			batch = append(batch[:0], op)
		case <-s.stop:
			return
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case op := <-s.ops:
				batch = append(batch, op)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range batch {
				if op.step == "" {
					op.read = p.HGetAll(ctx, key(op.id))
					continue
				}
				p.HSet(ctx, key(op.id), string(op.step), op.value)
				p.Expire(ctx, key(op.id), s.ttl)
			}
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			err = fmt.Errorf("step records (a batch of %d): %w", len(batch), err)
		} else {
			err = nil
		}
		for _, op := range batch {
			op.err <- err
		}
	}
}

// Close stops the batcher; pending operations fail.
func (s *RedisSteps) Close() {
	close(s.stop)
	<-s.done
}

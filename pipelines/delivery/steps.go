package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StepStore keeps a durable record of the steps each request started and
// completed, for backends that cannot be made idempotent (mode b of seed
// 002; mode a, PUT by delivery id, needs none). A replayed request reads it
// and skips what was done; a step started and never finished (the worker
// crashed mid-call, or an attempt was cut short) has an unknown outcome and
// is compensated rather than risked twice.
type StepStore interface {
	// Load returns what is recorded for a request.
	Load(ctx context.Context, id string) (StepRecord, error)
	// Start notes that a request is about to call a step.
	Start(ctx context.Context, id string, step Step) error
	// Record notes that a request completed a step, with the value it
	// returned (the drone id of schedule_drone).
	Record(ctx context.Context, id string, step Step, value string) error
	// Abandon notes that a started call certainly did not act (the service
	// answered no), so that the step may be called again.
	Abandon(ctx context.Context, id string, step Step) error
}

// StepRecord is what a StepStore holds for one request.
type StepRecord struct {
	Done    map[Step]string // completed steps and their values
	Started map[Step]bool   // steps called and neither completed nor abandoned
}

// RedisSteps is a StepStore in Redis: one hash per request
// ("sluice:steps:<id>"; field <step> = value once done, <step>:started
// while a call is out), expiring after TTL. Reads and writes from
// concurrent requests are batched: whatever is waiting goes in one
// pipeline, one round trip, so that a step costs a fraction of one.
type RedisSteps struct {
	cl   redis.UniversalClient
	ttl  time.Duration
	ops  chan *stepOp
	stop chan struct{}
	done chan struct{}
}

// stepOp is one operation waiting for its batch.
type stepOp struct {
	kind  opKind
	id    string
	step  Step
	value string
	read  *redis.MapStringStringCmd
	err   chan error
}

type opKind uint8

const (
	opLoad opKind = iota
	opStart
	opRecord
	opAbandon
)

const startedSuffix = ":started"

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

// Load reads the request's record.
func (s *RedisSteps) Load(ctx context.Context, id string) (StepRecord, error) {
	op := &stepOp{kind: opLoad, id: id}
	if err := s.do(ctx, op); err != nil {
		return StepRecord{}, fmt.Errorf("reading step record of %s: %w", id, err)
	}
	rec := StepRecord{Done: map[Step]string{}, Started: map[Step]bool{}}
	for k, v := range op.read.Val() {
		if step, ok := strings.CutSuffix(k, startedSuffix); ok {
			rec.Started[Step(step)] = true
		} else {
			rec.Done[Step(k)] = v
		}
	}
	return rec, nil
}

// Start writes that a call of step is out, once its batch is written.
func (s *RedisSteps) Start(ctx context.Context, id string, step Step) error {
	return s.write(ctx, &stepOp{kind: opStart, id: id, step: step})
}

// Record writes that a request completed a step.
func (s *RedisSteps) Record(ctx context.Context, id string, step Step, value string) error {
	return s.write(ctx, &stepOp{kind: opRecord, id: id, step: step, value: value})
}

// Abandon clears a started mark.
func (s *RedisSteps) Abandon(ctx context.Context, id string, step Step) error {
	return s.write(ctx, &stepOp{kind: opAbandon, id: id, step: step})
}

func (s *RedisSteps) write(ctx context.Context, op *stepOp) error {
	if err := s.do(ctx, op); err != nil {
		return fmt.Errorf("writing step record of %s (%s): %w", op.id, op.step, err)
	}
	return nil
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
				k := key(op.id)
				switch op.kind {
				case opLoad:
					op.read = p.HGetAll(ctx, k)
					continue
				case opStart:
					p.HSet(ctx, k, string(op.step)+startedSuffix, "1")
				case opRecord:
					p.HSet(ctx, k, string(op.step), op.value)
					p.HDel(ctx, k, string(op.step)+startedSuffix)
				case opAbandon:
					p.HDel(ctx, k, string(op.step)+startedSuffix)
				}
				p.Expire(ctx, k, s.ttl)
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

package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// run is the state of one Run. Produce promises, which franz-go runs on
// its own goroutines, settle their message or hand the failure to the
// stage goroutine through fails.
type run[T any] struct {
	s  *Sink[T]
	in *stream.Inlet[T]

	mu    sync.Mutex
	fails []failed[T]
	// pending counts the records whose promise has not run yet; each
	// promise that ends signals idle, so that Run can wait for all.
	pending atomic.Int64
	idle    chan struct{}
	failed  chan struct{} // a failure was added to fails

	tracer        *failureTracer  // a failure sink's, in a traced pipeline
	defaultTopic  string          // the client's, for records without a topic
	measuresAlone bool            // the producer refuses a record for itself, never for its batch
	warnedBatch   map[string]bool // topics whose refused batches were warned of
}

type failed[T any] struct {
	m    stream.Message[T]
	rec  *kgo.Record
	step int // 0: the Encoder's record; n: the Shrinker's nth
	err  error
	// alone: rec was produced in a batch of its own, so a refusal as too
	// large is about rec itself, not about the records batched with it.
	alone bool
}

// produceFrom encodes and produces items[i:]. A panic in the Encoder is
// the encoding error of the message that caused it, and produceFrom
// returns just past it: one recover per panic, not a defer per message.
func (r *run[T]) produceFrom(ctx context.Context, items []stream.Message[T], i int) (next int, err error) {
	defer func() {
		if p := recover(); p != nil {
			next, err = i+1, r.unencodable(ctx, items[i], stream.NewPanicError(p))
		}
	}()
	for ; i < len(items); i++ {
		rec, err := r.s.encode(&items[i])
		if err != nil {
			if err := r.unencodable(ctx, items[i], fmt.Errorf("encoding: %w", err)); err != nil {
				return i + 1, err
			}
			continue
		}
		r.produce(ctx, items[i], rec, 0, false)
	}
	return i, nil
}

// ErrUnproducible is wrapped by the failure of a message whose record the
// client cannot even try to produce: the Encoder (or a Shrinker) returned
// no record, or one without a topic while the client has no default topic.
// It is the message's own failure, like a record too large.
var ErrUnproducible = errors.New("sluice: record cannot be produced")

// produce hands rec to the client; alone says that nothing else of the
// sink is in flight (see produceAlone).
func (r *run[T]) produce(ctx context.Context, m stream.Message[T], rec *kgo.Record, step int, alone bool) {
	err := r.s.byLevel(&m, rec)
	if err == nil {
		err = r.check(rec)
	}
	if err != nil {
		r.fail(failed[T]{m: m, rec: rec, step: step, err: err, alone: alone})
		return
	}
	var traced func(error)
	if r.tracer != nil {
		topic := rec.Topic
		if topic == "" {
			topic = r.defaultTopic
		}
		traced = r.tracer.start(&m.Envelope, m.Value, topic)
	}
	r.pending.Add(1)
	r.s.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		if traced != nil {
			traced(err)
		}
		if err == nil {
			r.s.produced.Add(1)
			if step > 0 {
				r.s.shrunk.Add(1)
			}
			r.in.SettleAsync(&m, r.s.outcome)
		} else {
			r.s.failed.Add(1)
			r.fail(failed[T]{m: m, rec: rec, step: step, err: err, alone: alone})
		}
		r.pending.Add(-1)
		select {
		case r.idle <- struct{}{}:
		default:
		}
	})
}

// check reports why rec cannot be handed to the client at all.
func (r *run[T]) check(rec *kgo.Record) error {
	switch {
	case rec == nil:
		return fmt.Errorf("%w: the encoder returned no record", ErrUnproducible)
	case rec.Topic == "" && r.defaultTopic == "":
		return fmt.Errorf("%w: it has no topic and the client no default topic", ErrUnproducible)
	}
	return nil
}

// fail hands a failed record to the stage goroutine.
func (r *run[T]) fail(f failed[T]) {
	r.mu.Lock()
	r.fails = append(r.fails, f)
	r.mu.Unlock()
	select {
	case r.failed <- struct{}{}:
	default:
	}
}

// wait returns once every promise ran, or when ctx ends.
func (r *run[T]) wait(ctx context.Context) error {
	for r.pending.Load() > 0 {
		select {
		case <-r.idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// unencodable produces the Shrinker's record in place of the one the
// Encoder could not make, or fails the message.
func (r *run[T]) unencodable(ctx context.Context, m stream.Message[T], err error) error {
	if rec := r.smaller(&m, nil, 1, &err); rec != nil {
		r.produce(ctx, m, rec, 1, false)
		return nil
	}
	return r.in.Fail(ctx, m, err)
}

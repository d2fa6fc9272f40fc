package flow

import (
	"context"
	"time"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// DelayWindow is the most messages Delay holds while they wait; with that
// many held it stops reading its input, so its source slows down.
const DelayWindow = 4096

// Delay holds each message until due returns a time that has passed, then
// passes it on. Messages of one source partition (topic and partition)
// keep their order: one due later holds back those behind it in its
// partition, while the other partitions' messages go ahead. So use it on
// partitions ordered by due time, such as a parking topic replayed with
// sink/kafka.ReplayAt. A zero time is due at once. It holds at most
// DelayWindow messages and then stops reading, so its source slows down;
// the messages it holds are unsettled, so a crash replays them. When the
// pipeline is asked to stop, Delay stops waiting: messages already due go
// on, the others stay unsettled (replayed later) and do not hold up the
// drain. A panic in due fails that message.
//
// Options: Recheck asks due again, for every message held, when told to
// (a replay made due early because its cause is gone).
func Delay[T any](due func(e *stream.Envelope) time.Time, opts ...DelayOption) stream.Flow[T, T] {
	f := &delayFlow[T]{due: due}
	for _, o := range opts {
		o(&f.opts)
	}
	return f
}

// DelayOption configures Delay.
type DelayOption func(*delayOptions)

type delayOptions struct {
	recheck <-chan struct{}
}

// Recheck makes Delay ask due again, for every message it holds, each
// time ch receives: a due function that consults something besides the
// envelope (has the service this parked message failed on recovered
// since?) can then bring messages forward, and they go on at once,
// partitions still in order. Messages read later are asked when they
// arrive, as always. A panic in due while rechecking keeps the message's
// time. Default: due is asked once per message.
func Recheck(ch <-chan struct{}) DelayOption { return func(o *delayOptions) { o.recheck = ch } }

type delayFlow[T any] struct {
	due  func(e *stream.Envelope) time.Time
	opts delayOptions
}

func (f *delayFlow[T]) Name() string { return "delay" }

func (f *delayFlow[T]) Validate() error {
	if f.due == nil {
		return stage.NilArg("delay", "due")
	}
	return nil
}

// waiting is a message held by Delay with the time it is due.
type waiting[T any] struct {
	m   stream.Message[T]
	due time.Time
}

type partitionKey struct {
	topic     string
	partition int32
}

// delayRun is the state of one Run: a queue of waiting messages per
// partition.
type delayRun[T any] struct {
	f        *delayFlow[T]
	in       *stream.Inlet[T]
	out      *stream.Outlet[T]
	queues   map[partitionKey][]waiting[T]
	held     int
	draining bool
}

func (f *delayFlow[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	r := &delayRun[T]{f: f, in: in, out: out, queues: map[partitionKey][]waiting[T]{}}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	inputDone := false
	for {
		next, err := r.release(ctx, time.Now())
		if err != nil {
			return err
		}
		if inputDone && r.held == 0 {
			return nil
		}
		if err := in.FlushOutputs(ctx); err != nil {
			return err
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			t.Reset(time.Until(next))
			timer = t.C
		}
		var inC <-chan *stream.Batch[T]
		if !inputDone && r.held < DelayWindow {
			inC = in.C()
		}
		var draining <-chan struct{}
		if !r.draining {
			draining = in.Draining()
		}
		select {
		case b, ok := <-inC:
			if !ok {
				inputDone = true
				if r.draining {
					return nil // what still waits stays unsettled
				}
				continue
			}
			in.Received(b)
			err := stage.Each(ctx, in, b.Items, func(m *stream.Message[T]) error { return r.hold(ctx, m) })
			b.Release()
			if err != nil {
				return err
			}
		case <-timer:
		case <-f.opts.recheck:
			r.recheck()
		case <-draining:
			// Let go of what is not due: unsettled, it is replayed later.
			r.draining = true
			for k, q := range r.queues {
				delete(r.queues, k)
				r.held -= len(q)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if timer != nil && !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// hold queues m behind its partition's waiting messages, or sends it at
// once if it is due and none wait. A panic in due fails m (stage.Each).
func (r *delayRun[T]) hold(ctx context.Context, m *stream.Message[T]) error {
	due := r.f.due(&m.Envelope)
	k := partitionKey{m.Topic, m.Partition}
	q := r.queues[k]
	if len(q) == 0 && !due.After(time.Now()) {
		return r.out.Send(ctx, *m)
	}
	if r.draining {
		return nil // not due, and the pipeline is stopping: left unsettled
	}
	r.queues[k] = append(q, waiting[T]{m: *m, due: due})
	r.held++
	return nil
}

// recheck asks due again for every message held.
func (r *delayRun[T]) recheck() {
	for _, q := range r.queues {
		for i := range q {
			q[i].due = r.safeDue(&q[i].m.Envelope, q[i].due)
		}
	}
}

// safeDue is due(e), or was if due panics.
func (r *delayRun[T]) safeDue(e *stream.Envelope, was time.Time) (at time.Time) {
	defer func() {
		if recover() != nil {
			at = was
		}
	}()
	return r.f.due(e)
}

// release sends every message that is due and at the head of its
// partition's queue, and returns when the next one is due (zero: none
// waits).
func (r *delayRun[T]) release(ctx context.Context, now time.Time) (next time.Time, err error) {
	for k, q := range r.queues {
		i := 0
		for ; i < len(q) && !q[i].due.After(now); i++ {
			if err := r.out.Send(ctx, q[i].m); err != nil {
				return time.Time{}, err
			}
		}
		r.held -= i
		if i == len(q) {
			delete(r.queues, k)
			continue
		}
		clear(q[:i])
		r.queues[k] = q[i:]
		if d := q[i].due; next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next, nil
}

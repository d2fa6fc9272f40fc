package flow

import (
	"context"
	"sync"
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
// A message read under an assignment of its partition (stream.Assignment:
// the Kafka sources' messages) is held only while the assignment lasts:
// once it has ended (the partition was revoked or lost, and whoever reads
// it now replays what this reader left unsettled), its messages are let
// go of, unsettled, rather than handed on at their time. They do not hold
// back the partition's messages of a later assignment.
//
// Options: Recheck asks due again, for every message held, when told to
// (a replay made due early because its cause is gone); AnyOrder lets each
// message go when due, whatever its partition's order.
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
	recheck  <-chan struct{}
	anyOrder bool
}

// AnyOrder lets each message go on as soon as it is due, whatever its
// partition's order: a message due later holds back none behind it. For
// messages whose order means nothing, and whose times differ: the
// replays of independent requests, parked for a Retry-After of a second
// beside others parked for minutes. What remains: messages of a
// partition found due together still go in its order, and a
// message held stays unsettled until it goes, so a crash replays it as
// without AnyOrder. Default: each partition in order.
func AnyOrder() DelayOption { return func(o *delayOptions) { o.anyOrder = true } }

// Recheck makes Delay ask due again, for every message it holds, each
// time ch receives: a due function that consults something besides the
// envelope (has the service this parked message failed on recovered
// since?) can then bring messages forward, and they go on at once,
// partitions still in order (unless AnyOrder). Messages read later are asked when they
// arrive, as always. A panic in due while rechecking keeps the message's
// time. Closing ch asks once more, then no more. Default: due is asked
// once per message.
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

	// ended receives the assignments of held messages that ended, from
	// one watcher goroutine per assignment (watch), which end with wctx.
	ended    chan stream.Assignment
	watched  map[stream.Assignment]bool
	wctx     context.Context
	watchers sync.WaitGroup
}

func (f *delayFlow[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	wctx, stopWatching := context.WithCancel(ctx)
	r := &delayRun[T]{f: f, in: in, out: out, queues: map[partitionKey][]waiting[T]{},
		ended: make(chan stream.Assignment), watched: map[stream.Assignment]bool{}, wctx: wctx}
	defer func() {
		stopWatching()
		r.watchers.Wait()
	}()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	inputDone := false
	recheck := f.opts.recheck
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
		case _, ok := <-recheck:
			if !ok {
				recheck = nil // closed: nothing more to hear from it
			}
			r.recheck()
		case a := <-r.ended:
			delete(r.watched, a)
			r.drop(a)
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
	a := m.Handle().Assignment()
	if a != nil && over(a) {
		return nil // its reader is gone: whoever reads the partition now replays it
	}
	due := r.f.due(&m.Envelope)
	k := partitionKey{m.Topic, m.Partition}
	q := r.queues[k]
	if (len(q) == 0 || r.f.opts.anyOrder) && !due.After(time.Now()) {
		return r.out.Send(ctx, *m)
	}
	if r.draining {
		return nil // not due, and the pipeline is stopping: left unsettled
	}
	r.queues[k] = append(q, waiting[T]{m: *m, due: due})
	r.held++
	r.watch(a)
	return nil
}

// watch starts, once per assignment, the goroutine that tells Run when a
// ends, so that its messages held are let go of then.
func (r *delayRun[T]) watch(a stream.Assignment) {
	if a == nil || r.watched[a] {
		return
	}
	r.watched[a] = true
	r.watchers.Go(func() {
		select {
		case <-a.Ended():
			select {
			case r.ended <- a:
			case <-r.wctx.Done():
			}
		case <-r.wctx.Done():
		}
	})
}

// drop lets go of the messages held of assignment a, which ended:
// unsettled, they are replayed by whoever reads their partition now.
func (r *delayRun[T]) drop(a stream.Assignment) {
	for k, q := range r.queues {
		kept := q[:0]
		for _, w := range q {
			if w.m.Handle().Assignment() != a {
				kept = append(kept, w)
			}
		}
		clear(q[len(kept):])
		r.held -= len(q) - len(kept)
		if len(kept) == 0 {
			delete(r.queues, k)
		} else {
			r.queues[k] = kept
		}
	}
}

// gone reports whether m was read under an assignment that has ended.
func gone[T any](m *stream.Message[T]) bool {
	a := m.Handle().Assignment()
	return a != nil && over(a)
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
// partition's queue (with AnyOrder, every message due), and returns when
// the next one is due (zero: none waits).
func (r *delayRun[T]) release(ctx context.Context, now time.Time) (next time.Time, err error) {
	if r.f.opts.anyOrder {
		return r.releaseDue(ctx, now)
	}
	for k, q := range r.queues {
		i := 0
		for ; i < len(q); i++ {
			ended := gone(&q[i].m) // before Run heard of it: let go of, due or not
			if !ended && q[i].due.After(now) {
				break
			}
			if ended {
				continue
			}
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

// releaseDue is release with AnyOrder: every message due goes, wherever
// it waits in its partition's queue; the others keep their order.
func (r *delayRun[T]) releaseDue(ctx context.Context, now time.Time) (next time.Time, err error) {
	for k, q := range r.queues {
		kept := q[:0]
		for _, w := range q {
			switch {
			case gone(&w.m): // let go of, due or not
			case w.due.After(now):
				kept = append(kept, w)
				if next.IsZero() || w.due.Before(next) {
					next = w.due
				}
			default:
				if err := r.out.Send(ctx, w.m); err != nil {
					return time.Time{}, err // the run ends
				}
			}
		}
		r.held -= len(q) - len(kept)
		clear(q[len(kept):])
		if len(kept) == 0 {
			delete(r.queues, k)
		} else {
			r.queues[k] = kept
		}
	}
	return next, nil
}

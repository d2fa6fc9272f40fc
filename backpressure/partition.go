package backpressure

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-streams/sluice/stream"
)

// PartitionLimit is a flow that lets no source partition have more than a
// fixed number of unsettled messages downstream of it. A message whose
// partition is at the limit waits here, in order, while messages of other
// partitions pass; it goes on when one of its partition's messages is
// settled wherever that happens (a sink, a filter, a dead letter). So one
// slow or poisoned partition cannot take over the in-flight capacity of
// the stages behind it. Put it right after the source.
//
// The stage stops reading its input once window messages wait (default 4 x
// the limit; one input batch may overshoot it). Partitions are told apart by
// topic and partition number.
//
// When the pipeline is asked to stop, the limit is lifted: what waits
// goes on, for the stages behind to finish or let go of.
//
// A partition's messages count per assignment (stream.Assignment, the
// Kafka sources'): once an assignment has ended, its messages stop
// counting, since a stage may let go of them unsettled (a window, or
// flow.Delay, does: whoever reads the partition now replays them), and
// the partition, given back, does not wait behind them.
//
// Stages downstream must settle messages without waiting for the end of
// their input: a flow.Batch without maxWait behind a PartitionLimit can wait
// forever for a message that waits for it.
type PartitionLimit[T any] struct {
	limit  int
	window int

	mu       sync.Mutex
	released []slot // settled since the stage last looked
	notify   chan struct{}

	waiting atomic.Int64
}

type partKey struct {
	topic     string
	partition int32
}

// NewPartitionLimit returns a limit of n unsettled messages per partition
// with a waiting room of window messages (0: 4 x n).
func NewPartitionLimit[T any](n, window int) *PartitionLimit[T] {
	if window == 0 {
		window = 4 * n
	}
	return &PartitionLimit[T]{limit: n, window: window}
}

// Name returns "partition-limit".
func (p *PartitionLimit[T]) Name() string { return "partition-limit" }

// Validate reports a limit or window below 1.
func (p *PartitionLimit[T]) Validate() error {
	switch {
	case p.limit < 1:
		return &stream.ConfigError{Stage: "partition-limit", Argument: "n", Reason: fmt.Sprintf("must be at least 1, got %d", p.limit)}
	case p.window < 1:
		return &stream.ConfigError{Stage: "partition-limit", Argument: "window", Reason: fmt.Sprintf("must be at least 1, got %d", p.window)}
	}
	return nil
}

// Waiting returns how many messages wait for their partition now.
func (p *PartitionLimit[T]) Waiting() int64 { return p.waiting.Load() }

// slot is what PartitionLimit counts against its limit: the unsettled
// messages of one partition read under one assignment of it (a nil
// assignment for a source without assignments). A stage may let go of a
// message of an assignment that ended without settling it (a window or
// flow.Delay does: whoever reads the partition now replays it), so those
// messages stop counting when their assignment ends: else the partition,
// given back to this reader, would wait for ever behind them.
type slot struct {
	key partKey
	a   stream.Assignment
}

// settled is the handle of a message that passed: settling it frees a
// place of its partition, then settles the original.
type settled struct {
	p      interface{ release(slot) }
	slot   slot
	parent stream.Handle
}

func (s *settled) Settle(_ int64, o stream.Outcome) {
	s.p.release(s.slot)
	s.parent.Settle(o)
}

// Wrapped is the message's handle before it passed (stream.Wrapper): its
// assignment is the message's still.
func (s *settled) Wrapped() stream.Handle { return s.parent }

func (p *PartitionLimit[T]) release(s slot) {
	p.mu.Lock()
	p.released = append(p.released, s)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// ended reports whether assignment a has ended.
func ended(a stream.Assignment) bool {
	if a == nil {
		return false
	}
	select {
	case <-a.Ended():
		return true
	default:
		return false
	}
}

// limitRun is the state of one Run.
type limitRun[T any] struct {
	p         *PartitionLimit[T]
	out       *stream.Outlet[T]
	unsettled map[slot]int
	queues    map[partKey][]stream.Message[T]
	held      int
	draining  bool // the pipeline is stopping: the limit is lifted

	// over receives the slots whose assignment ended, from one watcher
	// goroutine per assignment (watch), which end with wctx.
	over     chan slot
	watched  map[stream.Assignment]bool
	wctx     context.Context
	watchers sync.WaitGroup
}

// Run passes messages on within the per-partition limit.
func (p *PartitionLimit[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	p.notify = make(chan struct{}, 1)
	wctx, stopWatching := context.WithCancel(ctx)
	r := &limitRun[T]{p: p, out: out, unsettled: map[slot]int{}, queues: map[partKey][]stream.Message[T]{},
		over: make(chan slot), watched: map[stream.Assignment]bool{}, wctx: wctx}
	defer func() {
		stopWatching()
		r.watchers.Wait()
	}()
	var (
		inputDone bool
		spare     []slot
	)
	for {
		p.mu.Lock()
		freed := p.released
		p.released = spare[:0]
		p.mu.Unlock()
		for _, s := range freed {
			n, ok := r.unsettled[s]
			if !ok {
				continue // its assignment ended: no longer counted
			}
			if n <= 1 {
				delete(r.unsettled, s)
			} else {
				r.unsettled[s] = n - 1
			}
			if err := r.next(ctx, s.key); err != nil {
				return err
			}
		}
		spare = freed[:0]
		p.waiting.Store(int64(r.held))
		if inputDone && r.held == 0 {
			return nil
		}
		if err := in.FlushOutputs(ctx); err != nil {
			return err
		}
		var inC <-chan *stream.Batch[T]
		if !inputDone && r.held < p.window {
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
				continue
			}
			in.Received(b)
			for _, m := range b.Items {
				k := partKey{m.Topic, m.Partition}
				s := slot{k, m.Handle().Assignment()}
				if len(r.queues[k]) == 0 && r.free(s) {
					if err := r.pass(ctx, s, m); err != nil {
						b.Release()
						return err
					}
					continue
				}
				r.queues[k] = append(r.queues[k], m)
				r.held++
			}
			b.Release()
		case s := <-r.over:
			delete(r.watched, s.a)
			delete(r.unsettled, s)
			if err := r.next(ctx, s.key); err != nil {
				return err
			}
		case <-draining:
			// What waits goes on: a stage behind may let go of the
			// messages that hold its partition's places, unsettled (a
			// Delay does of what is not due), and they would never be
			// freed. The stages behind finish or let go of these too.
			r.draining = true
			for k := range r.queues {
				if err := r.next(ctx, k); err != nil {
					return err
				}
			}
		case <-p.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// free reports whether a message of slot s may pass now: its slot is
// below the limit, its assignment ended (then it is not counted), or the
// pipeline is stopping.
func (r *limitRun[T]) free(s slot) bool {
	return r.draining || r.unsettled[s] < r.p.limit || ended(s.a)
}

// pass sends m on, counted against its slot unless its assignment ended
// (its settles go nowhere then, and a stage may let go of it unsettled).
func (r *limitRun[T]) pass(ctx context.Context, s slot, m stream.Message[T]) error {
	if ended(s.a) {
		return r.out.Send(ctx, m)
	}
	r.unsettled[s]++
	r.watch(s)
	m.SetHandle(stream.NewHandle(&settled{p: r.p, slot: s, parent: m.Handle()}, 0))
	return r.out.Send(ctx, m)
}

// next passes the messages waiting at the head of partition k's queue
// that may pass now.
func (r *limitRun[T]) next(ctx context.Context, k partKey) error {
	q := r.queues[k]
	i := 0
	for ; i < len(q); i++ {
		s := slot{k, q[i].Handle().Assignment()}
		if !r.free(s) {
			break
		}
		if err := r.pass(ctx, s, q[i]); err != nil {
			return err
		}
		q[i] = stream.Message[T]{}
		r.held--
	}
	switch {
	case i == len(q):
		delete(r.queues, k)
	case i > 0:
		r.queues[k] = q[i:]
	}
	return nil
}

// watch starts, once per assignment, the goroutine that tells Run when
// it ends, so that its messages stop counting then.
func (r *limitRun[T]) watch(s slot) {
	if s.a == nil || r.watched[s.a] {
		return
	}
	r.watched[s.a] = true
	r.watchers.Go(func() {
		select {
		case <-s.a.Ended():
			select {
			case r.over <- s:
			case <-r.wctx.Done():
			}
		case <-r.wctx.Done():
		}
	})
}

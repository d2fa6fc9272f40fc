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
// Stages downstream must settle messages without waiting for the end of
// their input: a flow.Batch without maxWait behind a PartitionLimit can wait
// forever for a message that waits for it.
type PartitionLimit[T any] struct {
	limit  int
	window int

	mu       sync.Mutex
	released []partKey // settled since the stage last looked
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

// settled is the handle of a message that passed: settling it frees a
// place of its partition, then settles the original.
type settled struct {
	p      interface{ release(partKey) }
	key    partKey
	parent stream.Handle
}

func (s *settled) Settle(_ int64, o stream.Outcome) {
	s.p.release(s.key)
	s.parent.Settle(o)
}

// Wrapped is the message's handle before it passed (stream.Wrapper): its
// assignment is the message's still.
func (s *settled) Wrapped() stream.Handle { return s.parent }

func (p *PartitionLimit[T]) release(k partKey) {
	p.mu.Lock()
	p.released = append(p.released, k)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// Run passes messages on within the per-partition limit.
func (p *PartitionLimit[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	p.notify = make(chan struct{}, 1)
	var (
		unsettled = map[partKey]int{}
		queues    = map[partKey][]stream.Message[T]{}
		held      int
		inputDone bool
		spare     []partKey
	)
	pass := func(k partKey, m stream.Message[T]) error {
		unsettled[k]++
		m.SetHandle(stream.NewHandle(&settled{p: p, key: k, parent: m.Handle()}, 0))
		return out.Send(ctx, m)
	}
	for {
		p.mu.Lock()
		freed := p.released
		p.released = spare[:0]
		p.mu.Unlock()
		for _, k := range freed {
			unsettled[k]--
			if q := queues[k]; len(q) > 0 {
				m := q[0]
				q[0] = stream.Message[T]{}
				if len(q) == 1 {
					delete(queues, k)
				} else {
					queues[k] = q[1:]
				}
				held--
				if err := pass(k, m); err != nil {
					return err
				}
			} else if unsettled[k] == 0 {
				delete(unsettled, k)
			}
		}
		spare = freed[:0]
		p.waiting.Store(int64(held))
		if inputDone && held == 0 {
			return nil
		}
		if err := in.FlushOutputs(ctx); err != nil {
			return err
		}
		var inC <-chan *stream.Batch[T]
		if !inputDone && held < p.window {
			inC = in.C()
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
				if unsettled[k] < p.limit && len(queues[k]) == 0 {
					if err := pass(k, m); err != nil {
						b.Release()
						return err
					}
					continue
				}
				queues[k] = append(queues[k], m)
				held++
			}
			b.Release()
		case <-p.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

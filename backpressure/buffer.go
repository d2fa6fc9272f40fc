package backpressure

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluice-streams/sluice/stream"
)

// Overflow is what a Buffer does with a message that arrives when it is
// full.
type Overflow int

const (
	// Block stops reading the input until there is room: the upstream stages
	// wait (backpressure). Nothing is lost. The default.
	Block Overflow = iota
	// DropOldest evicts the oldest buffered message to make room; it is
	// settled as stream.Dropped.
	DropOldest
	// DropNewest discards the arriving message, settled as stream.Dropped.
	DropNewest
	// Fail ends the pipeline with ErrOverflow; the buffered messages stay
	// unsettled and are replayed.
	Fail
)

var overflowNames = [...]string{"block", "drop_oldest", "drop_newest", "fail"}

// String returns the strategy's name.
func (o Overflow) String() string {
	if o >= 0 && int(o) < len(overflowNames) {
		return overflowNames[o]
	}
	return fmt.Sprintf("Overflow(%d)", int(o))
}

// ErrOverflow is returned (wrapped) by a Buffer with the Fail strategy when
// a message arrives while it is full.
var ErrOverflow = errors.New("sluice: buffer overflow")

// Buffer is a flow that holds up to a fixed number of messages between its
// input and output and keeps reading its input while the output is full,
// applying its Overflow strategy when it runs out of room.
type Buffer[T any] struct {
	capacity int
	overflow Overflow
	dropped  atomic.Int64
	held     atomic.Int64
}

// NewBuffer returns a buffer of capacity messages with the given strategy.
// Besides the capacity, the buffer holds at most one batch on its way out.
func NewBuffer[T any](capacity int, overflow Overflow) *Buffer[T] {
	return &Buffer[T]{capacity: capacity, overflow: overflow}
}

// Name returns "buffer".
func (b *Buffer[T]) Name() string { return "buffer" }

// Validate reports a capacity below 1 or an unknown strategy.
func (b *Buffer[T]) Validate() error {
	if b.capacity < 1 {
		return &stream.ConfigError{Stage: "buffer", Argument: "capacity", Reason: fmt.Sprintf("must be at least 1, got %d", b.capacity)}
	}
	if b.overflow < Block || b.overflow > Fail {
		return &stream.ConfigError{Stage: "buffer", Argument: "overflow", Reason: fmt.Sprintf("unknown strategy %d", int(b.overflow))}
	}
	return nil
}

// BufferStats is a snapshot of a buffer.
type BufferStats struct {
	// Held is how many messages the buffer holds now; Dropped how many
	// it has dropped.
	Held, Dropped int64
}

// Stats returns the buffer's counters; it can be read while it runs.
func (b *Buffer[T]) Stats() BufferStats {
	return BufferStats{Held: b.held.Load(), Dropped: b.dropped.Load()}
}

// Run moves messages from in to out through the buffer.
func (b *Buffer[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	r := ring[T]{items: make([]stream.Message[T], b.capacity)}
	var (
		next  *stream.Batch[T] // taken from the ring, waiting for room downstream
		carry *stream.Batch[T] // Block: the rest of an input batch that did not fit
		taken int              // how much of carry is in the ring
	)
	defer func() {
		if next != nil {
			next.Release()
		}
		if carry != nil {
			carry.Release()
		}
	}()
	inC := in.C()
	for {
		for carry != nil && r.n < b.capacity {
			r.push(carry.Items[taken])
			taken++
			if taken == len(carry.Items) {
				carry.Release()
				carry, taken = nil, 0
			}
		}
		if next == nil && r.n > 0 {
			next = out.NewBatch()
			for r.n > 0 && len(next.Items) < out.BatchSize() {
				next.Items = append(next.Items, r.pop())
			}
			b.held.Store(int64(r.n))
		}
		var (
			outC chan<- *stream.Batch[T]
			outN int
		)
		if next != nil {
			outC, outN = out.C(), len(next.Items)
		}
		readC := inC
		if carry != nil {
			readC = nil // full: let upstream wait
		}
		select {
		case batch, ok := <-readC:
			if !ok {
				return b.drain(ctx, &r, &next, out)
			}
			in.Received(batch)
			if b.overflow == Block {
				carry, taken = batch, 0
				continue
			}
			for i := range batch.Items {
				if err := b.push(in, &r, batch.Items[i]); err != nil {
					batch.Release()
					return err
				}
			}
			batch.Release()
			b.held.Store(int64(r.n))
		case outC <- next:
			out.Sent(outN)
			next = nil
		case <-out.Closed():
			return stream.ErrDownstreamClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *Buffer[T]) push(in *stream.Inlet[T], r *ring[T], m stream.Message[T]) error {
	if r.n < len(r.items) {
		r.push(m)
		return nil
	}
	switch b.overflow {
	case DropOldest:
		old := r.pop()
		in.Settle(&old, stream.Dropped)
		r.push(m)
	case DropNewest:
		in.Settle(&m, stream.Dropped)
	default: // Fail; Block never pushes into a full ring
		return fmt.Errorf("%w: %d messages buffered", ErrOverflow, r.n)
	}
	b.dropped.Add(1)
	return nil
}

// drain hands on everything still held once the input has ended.
func (b *Buffer[T]) drain(ctx context.Context, r *ring[T], next **stream.Batch[T], out *stream.Outlet[T]) error {
	if *next != nil {
		for _, m := range (*next).Items {
			if err := out.Send(ctx, m); err != nil {
				return err
			}
		}
		(*next).Release()
		*next = nil
	}
	for r.n > 0 {
		if err := out.Send(ctx, r.pop()); err != nil {
			return err
		}
	}
	b.held.Store(0)
	return nil
}

// ring is a fixed-size FIFO of messages.
type ring[T any] struct {
	items []stream.Message[T]
	head  int
	n     int
}

func (r *ring[T]) push(m stream.Message[T]) {
	r.items[(r.head+r.n)%len(r.items)] = m
	r.n++
}

func (r *ring[T]) pop() stream.Message[T] {
	m := r.items[r.head]
	r.items[r.head] = stream.Message[T]{}
	r.head = (r.head + 1) % len(r.items)
	r.n--
	return m
}

package redisstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// ErrClosed is the error of a record produced to, or still waiting in, a
// closed Producer.
var ErrClosed = errors.New("sluice: redis stream producer closed")

// Producer appends Kafka records to Redis streams: each record to the
// stream named by its Topic, laid out as the Sink lays out an entry (its
// Partition, Offset and Timestamp are not kept). It is a
// sink/kafka.Producer, so the Kafka sinks — NewSink, NewFailureSink,
// NewDeadLetter, NewParkingFunc — write to Redis Streams through it
// unchanged. A record of more bytes than MaxBytes fails with an error that
// wraps kerr.MessageTooLarge (and ErrTooLarge): a dead letter writes it
// smaller, as it does for a Kafka broker's refusal.
//
// Records are written in the order they were produced, in batches of up to
// BatchSize entries, one round trip each, on a goroutine of the Producer's
// own; promises are called on it, in that order. A lost connection is
// retried for RetryFor; then the records not written, and those waiting
// behind them, fail with an error naming the address (ErrUnreachable),
// which the Kafka sinks treat as the broker's failure: the pipeline stops
// with their messages unsettled. Delivery is at-least-once: a record whose
// reply was lost with the connection may be written twice.
type Producer struct {
	o        options
	counters counters
	ctx      context.Context
	cancel   context.CancelFunc
	stopped  chan struct{}

	mu       sync.Mutex
	queue    []queued
	closed   bool
	wake     chan struct{} // a record was queued, or Close was called
	room     chan struct{} // closed when the queue shrank, then replaced
	changed  chan struct{} // closed when done grew, then replaced
	enqueued int64         // records produced so far
	done     int64         // records whose promise was called
}

var _ kafkasink.Producer = (*Producer)(nil)

type queued struct {
	ctx     context.Context
	r       *kgo.Record
	promise func(*kgo.Record, error)
	err     error // the record fails with it, unwritten
}

// NewProducer returns a Producer writing through client; Close it once
// done with it (before closing client). Options: MaxLen, MaxBytes,
// RetryFor, BatchSize, as for NewSink. A bad option fails every record
// produced with its *stream.ConfigError (Validate reports it at once).
func NewProducer(client redis.UniversalClient, opts ...Option) *Producer {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		o: newOptions(opts), ctx: ctx, cancel: cancel, stopped: make(chan struct{}),
		wake: make(chan struct{}, 1), room: make(chan struct{}), changed: make(chan struct{}),
	}
	go p.run(newWriter(client, p.o, &p.counters))
	return p
}

// MeasuresRecordsAlone tells the Kafka sinks that a record refused as too
// large is too large by itself (MaxBytes applies to each entry, not to a
// batch): they write it smaller at once.
func (p *Producer) MeasuresRecordsAlone() {}

// MessagingSystem returns "redis": the Kafka sinks' spans name the
// system so (sink/kafka.MessagingSystem).
func (p *Producer) MessagingSystem() string { return "redis" }

// Validate reports a bad option.
func (p *Producer) Validate() error { return p.o.validate("redis stream producer") }

// Stats returns the producer's counters; it can be read while it runs.
func (p *Producer) Stats() Stats { return p.counters.stats() }

// maxQueued is how many records may wait to be written before Produce
// blocks.
func (p *Producer) maxQueued() int { return 4 * p.o.batchSize }

// Produce queues r to be appended to the stream named r.Topic, and calls
// promise (if not nil) with its outcome once it is written or failed. It
// blocks while 4×BatchSize records wait to be written, until there is room
// or ctx ends (the record then fails with ctx's error, as a record whose
// ctx ends before it is written does).
func (p *Producer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if promise == nil {
		promise = func(*kgo.Record, error) {}
	}
	q := queued{ctx: ctx, r: r, promise: promise}
	p.mu.Lock()
	for !p.closed && len(p.queue) >= p.maxQueued() && q.err == nil {
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			q.err = ctx.Err()
		}
		p.mu.Lock()
	}
	if p.closed {
		p.enqueued++
		p.mu.Unlock()
		promise(r, ErrClosed)
		p.finished(1)
		return
	}
	p.queue = append(p.queue, q)
	p.enqueued++
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Flush returns once every record produced before the call has had its
// promise called, or when ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.enqueued
	for p.done < target {
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return nil
}

// Close stops the producer: a write under way is cut short, and every
// record not written fails with ErrClosed (Flush first to wait for them).
// Records produced after Close fail at once.
func (p *Producer) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	<-p.stopped
}

// finished counts n more records whose promise was called.
func (p *Producer) finished(n int) {
	p.mu.Lock()
	p.done += int64(n)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// run writes the queued records, a batch at a time, until Close.
func (p *Producer) run(w *writer) {
	defer close(p.stopped)
	var batch []queued
	var idx []int
	for {
		batch = p.take(batch[:0])
		if batch == nil {
			return
		}
		idx = p.write(w, batch, idx[:0])
		clear(batch)
	}
}

// take moves up to BatchSize queued records to batch, waiting for one;
// it returns nil once the producer is closed, having failed what waited.
func (p *Producer) take(batch []queued) []queued {
	p.mu.Lock()
	for len(p.queue) == 0 && !p.closed {
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.ctx.Done():
		}
		p.mu.Lock()
	}
	if p.closed {
		rest := p.queue
		p.queue = nil
		p.mu.Unlock()
		p.failAll(rest, ErrClosed)
		return nil
	}
	n := min(len(p.queue), p.o.batchSize)
	batch = append(batch, p.queue[:n]...)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	close(p.room)
	p.room = make(chan struct{})
	p.mu.Unlock()
	return batch
}

// write appends batch's records and calls their promises, in order. idx
// is scratch space, returned for the next call.
func (p *Producer) write(w *writer, batch []queued, idx []int) []int {
	hs := w.hs[:0]
	for i := range batch {
		q := &batch[i]
		idx = append(idx, -1) // the record's entry in w, if it has one
		if q.err == nil {
			q.err = q.ctx.Err()
		}
		if q.err != nil {
			continue
		}
		if q.r == nil {
			q.err = fmt.Errorf("%w: no record", kafkasink.ErrUnproducible)
			continue
		}
		hs = hs[:0]
		for _, h := range q.r.Headers {
			hs = append(hs, stream.Header{Key: h.Key, Value: h.Value})
		}
		if q.r.Topic == "" {
			q.err = fmt.Errorf("%w: it has no topic, the stream to append to", kafkasink.ErrUnproducible)
			continue
		}
		if err := w.add(q.ctx, q.r.Topic, q.r.Key, q.r.Value, hs); err != nil {
			p.counters.refused.Add(1)
			q.err = fmt.Errorf("%w (%w)", err, kerr.MessageTooLarge)
			continue
		}
		idx[i] = w.pending() - 1
	}
	err := w.flush(p.ctx)
	if errors.Is(err, context.Canceled) && p.ctx.Err() != nil {
		err = ErrClosed
	}
	for i := range batch {
		if idx[i] >= 0 && !w.wasWritten(idx[i]) {
			batch[i].err = err
		}
	}
	w.reset()
	for _, q := range batch {
		q.promise(q.r, q.err)
	}
	p.finished(len(batch))
	if errors.Is(err, ErrUnreachable) {
		// What waits behind would wait RetryFor again, for the same outage.
		p.mu.Lock()
		rest := p.queue
		p.queue = nil
		close(p.room)
		p.room = make(chan struct{})
		p.mu.Unlock()
		p.failAll(rest, err)
	}
	w.hs = hs[:0]
	return idx
}

// failAll fails every record of qs with err.
func (p *Producer) failAll(qs []queued, err error) {
	for _, q := range qs {
		q.promise(q.r, err)
	}
	if len(qs) > 0 {
		p.finished(len(qs))
	}
}

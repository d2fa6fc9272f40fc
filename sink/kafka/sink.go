// Package kafka is a producer sink for Kafka-compatible brokers, built on
// franz-go: pipeline outputs, failure queues and dead letters. A message is
// settled only once the broker has acknowledged its record, so an input is
// never committed before its output is durable (at-least-once across
// stages). Use a client with the idempotent producer on (franz-go's
// default) so that its own retries write no duplicates.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Encoder turns a message into the record to produce. An error fails that
// message (it goes to the failure stream).
type Encoder[T any] func(m *stream.Message[T]) (*kgo.Record, error)

// Sink produces one record per message.
type Sink[T any] struct {
	cl      *kgo.Client
	encode  Encoder[T]
	outcome stream.Outcome
	name    string

	produced, failed atomic.Int64
}

// NewSink returns a sink that produces encode(m) for each message m through
// cl and settles m as completed when the broker acknowledged it. The caller
// owns cl and closes it after the pipeline's Run returns.
func NewSink[T any](cl *kgo.Client, encode Encoder[T]) *Sink[T] {
	return &Sink[T]{cl: cl, encode: encode, outcome: stream.Completed, name: "kafka-producer"}
}

// SettleAs makes the sink settle acknowledged messages with outcome o
// instead of stream.Completed (a failure queue settles as
// stream.DeadLettered) and returns the sink.
func (s *Sink[T]) SettleAs(o stream.Outcome) *Sink[T] {
	s.outcome = o
	return s
}

// Records is the Encoder for byte messages: the record keeps the message's
// key, value and headers and goes to topic.
func Records(topic string) Encoder[[]byte] {
	return func(m *stream.Message[[]byte]) (*kgo.Record, error) {
		r := &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		return r, nil
	}
}

// Name returns the sink's name.
func (s *Sink[T]) Name() string { return s.name }

// Validate reports a nil client or encoder.
func (s *Sink[T]) Validate() error {
	switch {
	case s.cl == nil:
		return stage.NilArg(s.name, "cl")
	case s.encode == nil:
		return stage.NilArg(s.name, "encode")
	}
	return nil
}

// Produced returns how many records the broker acknowledged; Failed how
// many it did not.
func (s *Sink[T]) Produced() int64 { return s.produced.Load() }

// Failed returns how many records could not be produced.
func (s *Sink[T]) Failed() int64 { return s.failed.Load() }

type failed[T any] struct {
	m     stream.Message[T]
	topic string
	err   error
}

// Run produces every message. When the input ends it waits for the
// outcome of every record it produced (or for ctx to end) and then returns.
func (s *Sink[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	var (
		mu    sync.Mutex
		fails []failed[T]
		// pending counts the records whose promise has not run yet; each
		// promise that ends signals idle, so that Run can wait for all.
		pending atomic.Int64
		idle    = make(chan struct{}, 1)
	)
	handle := func() error {
		mu.Lock()
		fs := fails
		fails = nil
		mu.Unlock()
		for _, f := range fs {
			if !perRecord(f.err) {
				// The broker or the topic is the problem, not this message:
				// stop, leaving it unsettled for replay.
				return stream.Fatal(fmt.Errorf("producing to topic %q: %w", f.topic, f.err))
			}
			if err := in.Fail(ctx, f.m, fmt.Errorf("producing to topic %q: %w", f.topic, f.err)); err != nil {
				return err
			}
		}
		return nil
	}
	err := stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		for i := range b.Items {
			m := b.Items[i]
			rec, err := s.encode(&m)
			if err != nil {
				if err := in.Fail(ctx, m, fmt.Errorf("encoding: %w", err)); err != nil {
					return false, err
				}
				continue
			}
			pending.Add(1)
			s.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
				if err == nil {
					s.produced.Add(1)
					m.Settle(s.outcome)
				} else {
					s.failed.Add(1)
					mu.Lock()
					fails = append(fails, failed[T]{m: m, topic: r.Topic, err: err})
					mu.Unlock()
				}
				pending.Add(-1)
				select {
				case idle <- struct{}{}:
				default:
				}
			})
		}
		return false, handle()
	})
	if err != nil {
		return err
	}
	if err := s.cl.Flush(ctx); err != nil {
		return err
	}
	// Flush waits for the records the client buffered, not for those it
	// failed before buffering them (too large for MaxBufferedBytes, no
	// topic): their promises run on a goroutine of their own, maybe after
	// Flush returned. Returning before them would leave their messages
	// neither settled nor failed.
	for pending.Load() > 0 {
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return handle()
}

// perRecord reports whether a produce error is about the record itself
// (too large, invalid), so that only that message fails.
func perRecord(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTimestamp)
}

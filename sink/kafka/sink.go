// Package kafka is a producer sink for Kafka-compatible brokers, built on
// franz-go: pipeline outputs, failure queues and dead letters. A message is
// settled only once the broker has acknowledged its record, so an input is
// never committed before its output is durable (at-least-once across
// stages). Use a client with the idempotent producer on (franz-go's
// default) so that its own retries write no duplicates.
//
// A record refused for a reason of its own (too large, invalid) fails only
// its message. A sink with a Shrinker writes a smaller record instead: a
// dead letter (NewDeadLetter) does, since a failure there would stop the
// pipeline; a parking (NewParking) only in a compact form that its replay
// reads as the same message (WithCompact), never cut short.
//
// The broker measures a record batch, not a record, against a topic's
// max.message.bytes: a topic whose limit is below the client's batch size
// (kgo.ProducerBatchMaxBytes, 1,000,012 bytes by default) refuses a batch of
// many small records whole, with the error a record too large gets. So a
// record refused as too large is first produced again alone, in a batch of
// its own; only if it is refused alone too is it written smaller or failed.
// Nothing is lost or written twice, but the order of a partition is: the
// client fails the refused batch, and the sink has produced more records
// by the time it learns of it, which go out first; the sink logs a
// warning naming the topic. Set the client's batch size at or below the
// topics' limit (kgo.ProducerBatchMaxBytesFn, with the limits
// MaxMessageBytes reads) so that batches are not refused at all: with it
// the sink keeps each partition's order.
//
// A client may be shared between sinks and pipelines. franz-go fails every
// record buffered for a partition when the context of the one at its head
// ends; a record of this sink failed so, by another's context, is produced
// again. Any other failure of the broker or the topic ends the pipeline,
// its message left unsettled for replay.
//
// # Priorities
//
// Kafka has no priority order. The two usual designs, "one queue per
// priority" and "one queue ordered by priority", become:
//
// One topic per level (TopicPerLevel): the producer writes each message
// to its level's topic (deliveries-high, -normal, -low) and the consumer
// reads one source per level through source.Priority, which takes the
// higher levels first and lets the lower ones wait in the broker as lag.
// A higher level is then received sooner, not only processed sooner:
// under overload the backlog is the low topic's, and what the consumer
// holds in memory is mostly high. Each level can have its own partitions,
// retention and consumers (a pool per priority). It costs a topic per
// level and a consumer per topic; a message's level is fixed when it is
// written (changing it needs a re-publish); and order between levels is
// lost (a high and a low message of one key may be processed in either
// order). It fits a small, fixed number of levels and an overload that
// must not delay the top one: the delivery scheduler's case.
//
// One topic, the level in a header (LevelHeader) or in the value: the
// producer writes to one topic as before and the consumer derives each
// message's level (flow.Prioritize) and serves by it inside the pipeline
// (flow.Lanes). Nothing changes for the topic, its partitioning or its
// consumers; order per key holds up to the stages that reorder by level;
// levels can be many, or decided by the consumer (from an account's tier,
// say). But Kafka hands the records over in their order: under overload a
// high message waits in the lag behind every low one written before it,
// and priority acts only on what the consumer has already read (its pipes
// and in-flight windows). It fits priorities that matter while the
// consumer keeps up (order inside a burst it absorbs), many or dynamic
// levels, or consumers that cannot read many topics.
package kafka

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Encoder turns a message into the record to produce. An error or a panic
// fails that message (it goes to the failure stream), unless the sink has a
// Shrinker that gives a record in its place.
type Encoder[T any] func(m *stream.Message[T]) (*kgo.Record, error)

// Shrinker gives a sink a record to produce in place of one that could not
// be written for a reason of its own: the client or the broker refused rec
// as too large or invalid (err is the produce error), or the Encoder
// returned an error or panicked (rec is nil, err says why). It returns a
// smaller record that still says what it can about m, or nil to give up:
// the message then fails as it would without a Shrinker. If the record it
// returns is refused too, it is asked again, step counting the records
// tried in place of the first (1, 2, ...), at most MaxShrinkSteps times.
// A record refused as too large is asked about only once it was refused
// alone, not as part of a batch the broker refused whole.
//
// A sink on the pipeline's failure path (a dead letter) cannot fail a
// message without ending the pipeline, so it should have one: NewDeadLetter
// and NewParking do. A Shrinker that panics gives up for that message.
type Shrinker[T any] func(m *stream.Message[T], rec *kgo.Record, step int, err error) *kgo.Record

// MaxShrinkSteps is the most records a sink tries in place of one that
// could not be written, for one message.
const MaxShrinkSteps = 8

// Producer is what a sink writes its records through: a *kgo.Client, or
// a writer to another transport that takes Kafka records (the Redis
// Streams sink's Producer, which appends each record to the stream named
// by its topic). Produce calls promise once with the record's outcome; an
// error a record has of its own (kerr.MessageTooLarge, ErrUnproducible)
// fails only its message. Flush returns once every record produced
// before it has its outcome.
//
// A Producer that measures each record alone against its limit, never a
// batch of them (the Redis Streams one), says so with a method
// MeasuresRecordsAlone(): a record it refuses as too large is then written
// smaller at once, rather than produced again alone first as a record of
// a Kafka batch refused whole is (see the package doc).
//
// A Producer that writes to a system other than Kafka names it with a
// method MessagingSystem() string ("redis" for the Redis Streams one):
// the spans of the failure sinks say that system (see MessagingSystem).
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
}

// MessagingSystem returns the system p writes to, as the spans'
// messaging.system names it: what p's MessagingSystem method returns if
// it has one, else "kafka".
func MessagingSystem(p Producer) string {
	if s, ok := p.(interface{ MessagingSystem() string }); ok {
		return s.MessagingSystem()
	}
	return "kafka"
}

// Sink produces one record per message.
type Sink[T any] struct {
	cl      Producer
	encode  Encoder[T]
	shrink  Shrinker[T]
	outcome stream.Outcome
	name    string
	invalid error // a bad argument of the constructor, for Validate

	levelTopics []string // TopicPerLevel
	levelHeader string   // LevelHeader

	produced, failed, shrunk atomic.Int64
}

// NewSink returns a sink that produces encode(m) for each message m through
// cl and settles m as completed when the broker acknowledged it. The caller
// owns cl and closes it after the pipeline's Run returns. A record refused
// for a reason of its own (too large, invalid) fails its message; the sink
// stops the pipeline, leaving the message unsettled, only when the broker
// or the topic is the problem. Options: WithShrinker (default: none),
// TopicPerLevel and LevelHeader (write by level of priority; none by
// default).
func NewSink[T any](cl Producer, encode Encoder[T], opts ...Option[T]) *Sink[T] {
	s := &Sink[T]{cl: cl, encode: encode, outcome: stream.Completed, name: "kafka-producer"}
	for _, o := range opts {
		o(s)
	}
	return s
}

// NewFailureSink is NewSink for a failure queue: its records are failures
// (failure events a supervisor reads, say), so it settles each message as
// stream.DeadLettered once the broker acknowledged it, not as Completed.
// NewDeadLetter is the failure queue of stream.Failure messages.
func NewFailureSink[T any](cl Producer, encode Encoder[T], opts ...Option[T]) *Sink[T] {
	s := NewSink(cl, encode, opts...)
	s.outcome = stream.DeadLettered
	s.name = "kafka-failures"
	return s
}

// Option configures a producer sink.
type Option[T any] func(*Sink[T])

// WithShrinker makes the sink ask fn for a smaller record when a message's
// record cannot be written, or cannot be encoded, instead of failing the
// message at once (see Shrinker). A message written smaller is settled as
// one written whole. Default: none.
func WithShrinker[T any](fn Shrinker[T]) Option[T] { return func(s *Sink[T]) { s.shrink = fn } }

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
	case s.invalid != nil:
		return s.invalid
	case isNil(s.cl):
		return stage.NilArg(s.name, "cl")
	case s.encode == nil:
		return stage.NilArg(s.name, "encode")
	}
	return nil
}

// Stats is a snapshot of a producer sink's counters.
type Stats struct {
	// Produced counts records the broker acknowledged, those written in
	// place of a failed one included.
	Produced int64
	// Failed counts records that could not be produced (a record that a
	// smaller one then replaced included).
	Failed int64
	// Shrunk counts messages written as the smaller record a Shrinker
	// gave.
	Shrunk int64
}

// Stats returns the sink's counters; it can be read while the sink runs.
func (s *Sink[T]) Stats() Stats {
	return Stats{Produced: s.produced.Load(), Failed: s.failed.Load(), Shrunk: s.shrunk.Load()}
}

// Run produces every message. A record that fails is handled as soon as
// its failure is known, not when more input comes: on a quiet failure
// topic its message would otherwise wait, unsettled, for the next one.
// When the input ends Run waits for the outcome of every record it
// produced (or for ctx to end) and then returns.
func (s *Sink[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	r := &run[T]{s: s, in: in, idle: make(chan struct{}, 1), failed: make(chan struct{}, 1),
		tracer: newFailureTracer(in.TracerProvider(), s.outcome, s.name, MessagingSystem(s.cl))}
	if o, ok := s.cl.(interface{ OptValue(any) any }); ok {
		r.defaultTopic, _ = o.OptValue(kgo.DefaultProduceTopic).(string)
	}
	_, r.measuresAlone = s.cl.(interface{ MeasuresRecordsAlone() })
	for {
		if _, err := r.handle(ctx); err != nil {
			return err
		}
		if err := in.FlushOutputs(ctx); err != nil {
			return err
		}
		select {
		case b, ok := <-in.C():
			if !ok {
				return r.finish(ctx)
			}
			in.Received(b)
			for i := 0; i < len(b.Items); {
				next, err := r.produceFrom(ctx, b.Items, i)
				if err != nil {
					b.Release()
					return err
				}
				i = next
			}
			b.Release()
		case <-r.failed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// finish waits, once the input has ended, for the outcome of every record
// produced and handles the failures.
func (r *run[T]) finish(ctx context.Context) error {
	for {
		if err := r.s.cl.Flush(ctx); err != nil {
			return err
		}
		// Flush waits for the records the client buffered, not for those
		// it failed before buffering them (larger than MaxBufferedBytes, no
		// topic): their promises run on a goroutine of their own, maybe
		// after Flush returned. Returning before them would leave their
		// messages neither settled nor failed.
		if err := r.wait(ctx); err != nil {
			return err
		}
		// Every promise ran, so every failure is in fails: if none was
		// produced again, smaller, nothing more can come.
		if again, err := r.handle(ctx); err != nil || again == 0 {
			return err
		}
	}
}

// isNil reports whether p is nil, or a nil *kgo.Client in the interface.
func isNil(p Producer) bool {
	c, ok := p.(*kgo.Client)
	return p == nil || ok && c == nil
}

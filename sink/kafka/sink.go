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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
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

// Sink produces one record per message.
type Sink[T any] struct {
	cl      *kgo.Client
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
func NewSink[T any](cl *kgo.Client, encode Encoder[T], opts ...Option[T]) *Sink[T] {
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
func NewFailureSink[T any](cl *kgo.Client, encode Encoder[T], opts ...Option[T]) *Sink[T] {
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
	case s.cl == nil:
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
	r := &run[T]{s: s, in: in, idle: make(chan struct{}, 1), failed: make(chan struct{}, 1)}
	r.defaultTopic, _ = s.cl.OptValue(kgo.DefaultProduceTopic).(string)
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

	defaultTopic string          // the client's, for records without a topic
	warnedBatch  map[string]bool // topics whose refused batches were warned of
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
	r.pending.Add(1)
	r.s.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
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

// handle deals with the records that failed since the last call: a failure
// of the record's own is produced again smaller, if the Shrinker says how,
// or fails its message; any other ends the pipeline. A record refused as
// too large that was not alone in its batch is first produced again alone
// (produceAlone). It returns how many records it produced again.
func (r *run[T]) handle(ctx context.Context) (again int, err error) {
	r.mu.Lock()
	fs := r.fails
	r.fails = nil
	r.mu.Unlock()
	var lone []failed[T]
	for _, f := range fs {
		topic := r.defaultTopic
		if f.rec != nil && f.rec.Topic != "" {
			topic = f.rec.Topic
		}
		if cancelledByAnother(ctx, f.rec, f.err) {
			r.produce(ctx, f.m, f.rec, f.step, false)
			again++
			continue
		}
		err := fmt.Errorf("producing to topic %q: %w", topic, f.err)
		if !perRecord(f.err) {
			// The broker or the topic is the problem, not this message:
			// stop, leaving it unsettled for replay.
			return again, stream.Fatal(err)
		}
		if tooLarge(f.err) && !f.alone {
			r.warnBatch(ctx, topic, f.err)
			lone = append(lone, f)
			continue
		}
		if rec := r.smaller(&f.m, f.rec, f.step+1, &err); rec != nil {
			r.produce(ctx, f.m, rec, f.step+1, false)
			again++
			continue
		}
		if err := r.in.Fail(ctx, f.m, err); err != nil {
			return again, err
		}
	}
	if len(lone) > 0 {
		if err := r.produceAlone(ctx, lone); err != nil {
			return again, err
		}
		again += len(lone)
	}
	return again, nil
}

// warnBatch tells, once per topic, that a batch to topic was refused as
// too large: its records are written again one by one, after those the
// sink produced meanwhile, out of their partition's order.
func (r *run[T]) warnBatch(ctx context.Context, topic string, err error) {
	if r.warnedBatch[topic] {
		return
	}
	if r.warnedBatch == nil {
		r.warnedBatch = map[string]bool{}
	}
	r.warnedBatch[topic] = true
	r.in.Logger().WarnContext(ctx, "a record batch was refused as too large: the topic's max.message.bytes is below the client's batch size; "+
		"its records are written again one by one, after the ones produced meanwhile, so out of order within their partition: "+
		"size the client's batches to the topic (kgo.ProducerBatchMaxBytesFn)",
		slog.String("topic", topic), slog.String("err", err.Error()))
}

// produceAlone produces each record of fs again in a record batch of its
// own: the broker refused a batch that held it as too large, and the batch
// may have been too large only with the records beside it (a topic whose
// max.message.bytes is below the client's batch size). With nothing else
// of the sink in flight, the client makes a batch of the one record (a
// client shared with another producer to the same partition could still
// add to it). Each record's outcome is known before the next is produced;
// new input waits meanwhile. A record refused alone too is then handled as
// too large on its own.
func (r *run[T]) produceAlone(ctx context.Context, fs []failed[T]) error {
	for _, f := range fs {
		if err := r.wait(ctx); err != nil {
			return err
		}
		r.produce(ctx, f.m, f.rec, f.step, true)
	}
	return r.wait(ctx)
}

// tooLarge reports whether a produce error is the client's or the broker's
// refusal of a record batch as too large.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// smaller asks the Shrinker, if any, for the record to try at step. A panic
// in it gives up, and is added to *err.
func (r *run[T]) smaller(m *stream.Message[T], rec *kgo.Record, step int, err *error) (out *kgo.Record) {
	if r.s.shrink == nil || step > MaxShrinkSteps {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			out, *err = nil, fmt.Errorf("%w; shrinking the record: %w", *err, stream.NewPanicError(p))
		}
	}()
	return r.s.shrink(m, rec, step, *err)
}

// cancelledByAnother reports whether a record failed for a context that
// is not the sink's: the client is shared, and franz-go fails every record
// buffered for a partition when the context of the one at its head ends
// (or fails a producer ID's initialization for it). The record is not at
// fault, and neither is the broker: it is produced again. With the sink's
// own context ended, Run is returning and the message stays unsettled.
//
// It is not another's when the record's own Context ended (an Encoder may
// set it: producing it again would fail it again, at once), nor when the
// context error is a network timeout's: net's dial and I/O timeouts are
// errors.Is context.DeadlineExceeded, and franz-go fails records with them
// (a producer ID that could not be initialized, once RecordRetries or
// RecordDeliveryTimeout are used up). That is the broker out of reach.
func cancelledByAnother(ctx context.Context, rec *kgo.Record, err error) bool {
	if ctx.Err() != nil || rec != nil && rec.Context != nil && rec.Context.Err() != nil {
		return false
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout()) &&
		!errors.Is(err, kgo.ErrRecordTimeout) && !errors.Is(err, kgo.ErrRecordRetries)
}

// perRecord reports whether a produce error is about the record itself
// (too large, invalid), so that only that message fails.
func perRecord(err error) bool {
	return errors.Is(err, ErrUnproducible) || errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTimestamp)
}

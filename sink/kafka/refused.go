package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

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
		if tooLarge(f.err) && !f.alone && !r.measuresAlone {
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

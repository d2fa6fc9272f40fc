package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Entry is what a message becomes in a stream: its value, key and headers
// laid out as fields (see the package doc), appended to Stream.
type Entry struct {
	// Stream is the stream to append to; empty: the sink's.
	Stream     string
	Key, Value []byte
	Headers    []stream.Header
}

// Encoder turns a message into the entry to append. An error or a panic
// fails that message (it goes to the pipeline's failure route).
type Encoder[T any] func(m *stream.Message[T]) (Entry, error)

// Values is the Encoder for byte messages: the entry has the message's
// key, value and headers, for the sink's stream.
func Values(m *stream.Message[[]byte]) (Entry, error) {
	return Entry{Key: m.Key, Value: m.Value, Headers: m.Headers}, nil
}

// Sink appends one entry per message to a Redis stream.
type Sink[T any] struct {
	client redis.UniversalClient
	stream string
	encode Encoder[T]
	o      options
	name   string

	counters counters
}

// NewSink returns a sink that appends encode(m) to streamName (or to the
// stream the entry names) for each message m, and settles m as
// completed once Redis has answered the XADD: the entries of a batch go in
// one round trip (BatchSize). The caller owns client and closes it after
// the pipeline's Run returns.
//
// A message whose entry cannot be written for a reason of its own (the
// Encoder's error or panic, more bytes than MaxBytes) fails, to the
// pipeline's failure route, and the others go on. A lost connection is
// retried for RetryFor; then Run fails with an error naming the address
// (ErrUnreachable) and the messages not written stay unsettled, to be
// replayed. A refusal by the server (a key of another type than stream,
// out of memory) fails Run at once, naming the stream. Delivery is
// at-least-once: an entry whose reply was lost with the connection is
// written again, so a stream may hold it twice.
//
// Options: MaxLen (trim each stream to about n entries; default none),
// MaxBytes (default 1 MiB), RetryFor (default 1 min), BatchSize (default
// 256).
func NewSink[T any](client redis.UniversalClient, streamName string, encode Encoder[T], opts ...Option) *Sink[T] {
	return &Sink[T]{client: client, stream: streamName, encode: encode, o: newOptions(opts), name: "redis-stream-producer"}
}

// Name returns the sink's name, "redis-stream-producer" (the source is "redis-stream").
func (s *Sink[T]) Name() string { return s.name }

// Validate reports a nil client or encoder, an empty stream name or a bad
// option.
func (s *Sink[T]) Validate() error {
	switch {
	case s.o.invalid != nil:
		return s.o.validate(s.name)
	case isNil(s.client):
		return stage.NilArg(s.name, "client")
	case s.encode == nil:
		return stage.NilArg(s.name, "encode")
	case s.stream == "":
		return &stream.ConfigError{Stage: s.name, Argument: "streamName", Reason: "must not be empty"}
	}
	return nil
}

// isNil reports whether client is nil, or a nil pointer in the interface.
func isNil(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// Run appends an entry per message. It writes what it holds as soon as
// its input is momentarily empty, or once it holds BatchSize entries, and
// settles each message when its entry is written. When the input ends it
// writes what is left and returns.
func (s *Sink[T]) Run(ctx context.Context, in *stream.Inlet[T]) error {
	r := &sinkRun[T]{s: s, in: in, w: newWriter(s.client, s.o, &s.counters)}
	for {
		b, err := r.next(ctx)
		if errors.Is(err, io.EOF) {
			return r.write(ctx)
		}
		if err != nil {
			return err
		}
		for i := 0; i < len(b.Items); {
			next, err := r.addFrom(ctx, b.Items, i)
			if err != nil {
				b.Release()
				return err
			}
			i = next
		}
		b.Release()
	}
}

// sinkRun is the state of one Run: the messages whose entries are queued
// in w, in the same order.
type sinkRun[T any] struct {
	s    *Sink[T]
	in   *stream.Inlet[T]
	w    *writer
	msgs []stream.Message[T]
}

// next returns the next batch of input, writing what is queued first if
// none is there yet.
func (r *sinkRun[T]) next(ctx context.Context) (*stream.Batch[T], error) {
	select {
	case b, ok := <-r.in.C():
		return r.got(b, ok)
	default:
	}
	if err := r.write(ctx); err != nil {
		return nil, err
	}
	return r.in.Recv(ctx)
}

func (r *sinkRun[T]) got(b *stream.Batch[T], ok bool) (*stream.Batch[T], error) {
	if !ok {
		return nil, io.EOF
	}
	r.in.Received(b)
	return b, nil
}

// addFrom encodes and queues items[i:], writing whenever BatchSize entries
// are queued. A panic in the Encoder is the failure of the message that
// caused it, and addFrom returns just past it: one recover per panic, not
// a defer per message.
func (r *sinkRun[T]) addFrom(ctx context.Context, items []stream.Message[T], i int) (next int, err error) {
	defer func() {
		if p := recover(); p != nil {
			next, err = i+1, r.fail(ctx, items[i], fmt.Errorf("encoding: %w", stream.NewPanicError(p)))
		}
	}()
	for ; i < len(items); i++ {
		m := &items[i]
		e, err := r.s.encode(m)
		if err != nil {
			if err := r.fail(ctx, *m, fmt.Errorf("encoding: %w", err)); err != nil {
				return i + 1, err
			}
			continue
		}
		if e.Stream == "" {
			e.Stream = r.s.stream
		}
		if err := r.w.add(ctx, e.Stream, e.Key, e.Value, e.Headers); err != nil {
			if err := r.fail(ctx, *m, err); err != nil {
				return i + 1, err
			}
			continue
		}
		r.msgs = append(r.msgs, *m)
		if r.w.pending() >= r.s.o.batchSize {
			if err := r.write(ctx); err != nil {
				return i + 1, err
			}
		}
	}
	return i, nil
}

// fail routes a message whose entry cannot be written to the failure
// route.
func (r *sinkRun[T]) fail(ctx context.Context, m stream.Message[T], err error) error {
	r.s.counters.refused.Add(1)
	return r.in.Fail(ctx, m, err)
}

// write writes the queued entries and settles the messages of those
// written; on an error, the others stay unsettled.
func (r *sinkRun[T]) write(ctx context.Context) error {
	if r.w.pending() == 0 {
		return nil
	}
	err := r.w.flush(ctx)
	if err == nil {
		r.in.SettleAll(r.msgs, stream.Completed)
	} else {
		for i := range r.msgs {
			if r.w.wasWritten(i) {
				r.in.Settle(&r.msgs[i], stream.Completed)
			}
		}
	}
	r.w.reset()
	clear(r.msgs)
	r.msgs = r.msgs[:0]
	return err
}

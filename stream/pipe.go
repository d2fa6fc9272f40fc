package stream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// DefaultBatchSize is the most messages a pipe moves in one batch.
const DefaultBatchSize = 256

// DefaultCapacity is the capacity of a pipe, in messages, unless the
// pipeline or the stage sets another.
const DefaultCapacity = 4096

// ErrDownstreamClosed is returned by Outlet operations when the stage reading
// the pipe has ended; the messages not yet handed on stay unsettled.
var ErrDownstreamClosed = errors.New("sluice: downstream stage has ended")

// Batch is a slice of messages moved between stages as one unit. A stage
// that receives a batch owns it until it calls Release, after which it must
// not touch the batch again. Batches are recycled, so the steady state
// allocates nothing per message.
type Batch[T any] struct {
	Items []Message[T]
	pool  *batchPool[T]
	// dirty bounds the slots of Items that may hold messages of an
	// earlier use: every slot from it on is zero (see put).
	dirty int
}

// Release returns the batch for reuse.
func (b *Batch[T]) Release() {
	if b.pool != nil {
		b.pool.put(b)
	}
}

type batchPool[T any] struct {
	size int
	p    sync.Pool
}

func (p *batchPool[T]) get() *Batch[T] {
	if v := p.p.Get(); v != nil {
		return v.(*Batch[T])
	}
	return &Batch[T]{Items: make([]Message[T], 0, p.size), pool: p}
}

func (p *batchPool[T]) put(b *Batch[T]) {
	// The messages of this use are not cleared: the next user overwrites
	// every slot it reads, and clearing a full batch cost ~6 ns a message
	// (a quarter of the engine's budget). What they keep alive is bounded
	// by the number of pooled batches, and sync.Pool drops idle ones
	// within two GC cycles. Slots past them, which earlier and larger uses
	// filled, are cleared: left, they kept what those messages point to
	// alive for as long as the batch is reused at a smaller size. A Kafka
	// record's value points into the fetch response it came in, so a few
	// such slots kept whole responses: twice the live heap of a consumer
	// whose batches were handed on partly full (the peers benchmark of
	// docs/benchmarks.md: 64-96 MB of fetch responses, 32 MB with them
	// cleared). Full batches, the engine's steady state, clear nothing.
	n := len(b.Items)
	if d := min(b.dirty, cap(b.Items)); d > n {
		clear(b.Items[n:d])
	}
	b.dirty = n
	b.Items = b.Items[:0]
	p.p.Put(b)
}

// pipe is the bounded connection between stages. Several writers may share
// one pipe (Merge); it closes when the last of them finishes.
type pipe[T any] struct {
	ch         chan *Batch[T]
	maxBatch   int
	pool       *batchPool[T]
	writers    atomic.Int32
	buffered   atomic.Int64
	readerDone chan struct{}
	readerOnce sync.Once
}

func newPipe[T any](pool *batchPool[T], capacity, batchSize int) *pipe[T] {
	mb := min(batchSize, capacity)
	slots := (capacity + mb - 1) / mb
	return &pipe[T]{
		ch:         make(chan *Batch[T], slots),
		maxBatch:   mb,
		pool:       pool,
		readerDone: make(chan struct{}),
	}
}

func (p *pipe[T]) writerDone() {
	if p.writers.Add(-1) == 0 {
		close(p.ch)
	}
}

func (p *pipe[T]) closeIfUnwritten() {
	if p.writers.Load() == 0 {
		close(p.ch)
	}
}

func (p *pipe[T]) readerGone() {
	p.readerOnce.Do(func() { close(p.readerDone) })
}

// Inlet is a stage's input. Recv hands out batches; before it blocks on an
// empty pipe it flushes the stage's outputs, which is what makes batching
// opportunistic.
type Inlet[T any] struct {
	p       *pipe[T]
	node    *node
	from    portState               // the port read: its writers are the stage's inputs
	settled [DeadLettered + 1]int64 // settles by outcome not yet added to node stats
	ids     []int64                 // scratch for SettleAll

	// With an Observer: when the batch being handled was received, and its
	// size, to report processing time when the stage asks for the next.
	gotAt time.Time
	gotN  int
}

// Recv returns the next batch, io.EOF when every upstream stage has
// finished, or ctx's error.
func (in *Inlet[T]) Recv(ctx context.Context) (*Batch[T], error) {
	in.processed()
	select {
	case b, ok := <-in.p.ch:
		return in.got(b, ok)
	default:
	}
	if err := in.FlushOutputs(ctx); err != nil {
		return nil, err
	}
	select {
	case b, ok := <-in.p.ch:
		return in.got(b, ok)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// C returns the channel of batches, for stages that must wait on their
// input and something else at once (a timer, a second pipe). A stage that
// receives from C must call Received for each batch and must flush its
// outputs itself before blocking.
func (in *Inlet[T]) C() <-chan *Batch[T] { return in.p.ch }

// Draining is closed once the pipeline has been asked to stop (its
// context was cancelled, or a stage failed): sources stop then, and the
// other stages finish what they hold within the drain timeout. A stage
// that holds messages only to wait for them (a delay) should stop waiting
// and let them go unsettled, to be replayed, rather than hold the drain up.
func (in *Inlet[T]) Draining() <-chan struct{} { return in.node.g.draining }

// Logger returns the pipeline's logger (stream.WithLogger) with the
// stage's name: a stage that logs and was given no logger of its own logs
// here.
func (in *Inlet[T]) Logger() *slog.Logger { return in.node.logger() }

// Stage returns the stage's name in the pipeline (Name, or its default):
// the name its logs, metrics and spans go by.
func (in *Inlet[T]) Stage() string { return in.node.name }

// TracerProvider returns the pipeline's tracer provider
// (WithTracerProvider), nil when tracing is off: a stage that traces its
// messages asks once when it starts.
func (in *Inlet[T]) TracerProvider() trace.TracerProvider { return in.node.tracer() }

// FlushOutputs hands on what every output of the stage (its failure output
// included) has built, and publishes the stage's settles counted since
// its last batch: a stage that waits idle shows none of them in flight.
// Stages that wait on C must call it before blocking; Recv does it for
// them.
func (in *Inlet[T]) FlushOutputs(ctx context.Context) error {
	in.publish()
	return in.node.flush(ctx)
}

// Received records a batch taken from C.
func (in *Inlet[T]) Received(b *Batch[T]) {
	n := int64(len(b.Items))
	in.p.buffered.Add(-n)
	in.node.stats.in.Add(n)
	in.publish()
	if in.node.obs != nil {
		in.gotAt, in.gotN = time.Now(), len(b.Items)
	}
}

// processed reports to the observer how long the stage took over the
// batch it received last.
func (in *Inlet[T]) processed() {
	if in.gotN > 0 && in.node.obs != nil {
		in.node.obs.Processed(in.gotN, time.Since(in.gotAt))
		in.gotN = 0
	}
}

// publish adds the settles counted since the last batch to the node stats.
func (in *Inlet[T]) publish() {
	for o, n := range in.settled {
		if n != 0 {
			in.node.stats.settled.Add(n)
			in.node.stats.byOutcome[o].Add(n)
			in.settled[o] = 0
		}
	}
}

func (in *Inlet[T]) got(b *Batch[T], ok bool) (*Batch[T], error) {
	if !ok {
		return nil, io.EOF
	}
	in.Received(b)
	return b, nil
}

func (in *Inlet[T]) buffered() int64 { return in.p.buffered.Load() }

// Buffered returns how many messages wait in the input's pipe, not yet
// received by the stage. It is safe from any goroutine.
func (in *Inlet[T]) Buffered() int64 { return max(0, in.p.buffered.Load()) }
func (in *Inlet[T]) capacity() int64 { return int64(cap(in.p.ch) * in.p.maxBatch) }

// inputs names the stages that write to the input.
func (in *Inlet[T]) inputs() []string {
	if in.from == nil {
		return nil
	}
	return in.from.writerNames()
}

// done publishes the last counts and tells writers the reader is gone.
func (in *Inlet[T]) done() {
	in.processed()
	in.publish()
	in.p.readerGone()
}

// Settle settles m with outcome o and counts it against the stage. Stages
// call it for messages that leave the pipeline in them (sinks, filters,
// drops).
func (in *Inlet[T]) Settle(m *Message[T], o Outcome) {
	m.handle.Settle(o)
	if o <= DeadLettered {
		in.settled[o]++
	}
	if obs := in.node.g.observer; obs != nil && !m.Timestamp.IsZero() {
		in.node.g.observeLatency(obs, &m.Envelope, time.Since(m.Timestamp))
	}
}

// SettleAsync is Settle for a message settled off the stage's goroutine:
// in a client's callback once the write it waited for was acknowledged,
// say. It is safe from any goroutine and counts against the stage at
// once; Settle, for the stage's own goroutine, is cheaper.
func (in *Inlet[T]) SettleAsync(m *Message[T], o Outcome) {
	if o <= DeadLettered {
		// Counted before the settle, so that whoever sees the message
		// settled sees it counted too.
		in.node.stats.settled.Add(1)
		in.node.stats.byOutcome[o].Add(1)
	}
	m.handle.Settle(o)
	if obs := in.node.g.observer; obs != nil && !m.Timestamp.IsZero() {
		in.node.g.observeLatency(obs, &m.Envelope, time.Since(m.Timestamp))
	}
}

// SettleAll settles every message of ms with outcome o (see the function
// SettleAll) and counts them against the stage.
func (in *Inlet[T]) SettleAll(ms []Message[T], o Outcome) {
	if in.ids == nil {
		in.ids = make([]int64, 0, 256)
	}
	settleAll(ms, o, &in.ids)
	if o <= DeadLettered {
		in.settled[o] += int64(len(ms))
	}
	if obs := in.node.g.observer; obs != nil {
		now := time.Now()
		for i := range ms {
			if ts := ms[i].Timestamp; !ts.IsZero() {
				in.node.g.observeLatency(obs, &ms[i].Envelope, now.Sub(ts))
			}
		}
	}
}

// Fail routes m to the stage's failure output with err as the reason. The
// message is settled later, by the dead letter that records it. It returns a
// non-nil error only if the failure could not be handed on; the stage should
// then return that error.
func (in *Inlet[T]) Fail(ctx context.Context, m Message[T], err error) error {
	return in.node.fail(ctx, m.Value, failureEnvelope(m), Failure{Err: err})
}

// FailWith is Fail with the attempt history: f.Err is the reason; the
// engine fills in Stage, Value and, when zero, At and FirstFailure.
func (in *Inlet[T]) FailWith(ctx context.Context, m Message[T], f Failure) error {
	return in.node.fail(ctx, m.Value, failureEnvelope(m), f)
}

// Outlet is a stage's output. Send appends to the batch being built and
// hands it on when it is full; Flush hands on a partial batch. The engine
// flushes before the stage blocks on its input and when the stage ends.
type Outlet[T any] struct {
	p       *pipe[T]
	cur     *Batch[T]
	node    *node
	max     int
	failure bool // the stage's failure output: not counted as Out
}

// TracerProvider returns the pipeline's tracer provider
// (WithTracerProvider), nil when tracing is off: a source that traces its
// messages asks once when it starts.
func (o *Outlet[T]) TracerProvider() trace.TracerProvider { return o.node.tracer() }

// Send appends m to the output. It blocks only when a full batch must be
// handed on and the pipe is full (backpressure).
func (o *Outlet[T]) Send(ctx context.Context, m Message[T]) error {
	if o.cur == nil {
		o.cur = o.p.pool.get()
	}
	o.cur.Items = append(o.cur.Items, m)
	if len(o.cur.Items) >= o.max {
		return o.Flush(ctx)
	}
	return nil
}

// Free returns the free slots of the batch being built, at least one,
// handing the batch on first if it is full (which may block, see Send). A
// stage fills a prefix of them in place and calls Extend with its length;
// slots it does not count are reused. Tight loops over Free/Extend are the
// fastest way to emit: no call and no envelope copy per message.
func (o *Outlet[T]) Free(ctx context.Context) ([]Message[T], error) {
	if o.cur != nil && len(o.cur.Items) >= o.max {
		if err := o.Flush(ctx); err != nil {
			return nil, err
		}
	}
	if o.cur == nil {
		o.cur = o.p.pool.get()
	}
	n := len(o.cur.Items)
	return o.cur.Items[n:o.max], nil
}

// Extend adds the first k slots returned by Free to the output.
func (o *Outlet[T]) Extend(ctx context.Context, k int) error {
	o.cur.Items = o.cur.Items[:len(o.cur.Items)+k]
	if len(o.cur.Items) >= o.max {
		return o.Flush(ctx)
	}
	return nil
}

// Slot returns the next free message of the batch being built, for a stage
// to fill in place; SendSlot then adds it to the output. A slot that is not
// sent is reused by the next Slot. Filling in place saves copying the
// message envelope once per stage on the hot path.
func (o *Outlet[T]) Slot() *Message[T] {
	if o.cur == nil {
		o.cur = o.p.pool.get()
	}
	n := len(o.cur.Items)
	return &o.cur.Items[:n+1][n]
}

// SendSlot adds the message filled through Slot to the output, handing the
// batch on when it is full (see Send). (Committing offsets is a
// Committer's Commit, unrelated.)
func (o *Outlet[T]) SendSlot(ctx context.Context) error {
	o.cur.Items = o.cur.Items[:len(o.cur.Items)+1]
	if len(o.cur.Items) >= o.max {
		return o.Flush(ctx)
	}
	return nil
}

// SendBatch hands on a whole batch received from an input of the same type,
// after the batch being built. It saves copying messages for stages that
// only remove some (filters). A batch larger than this output's batch size
// is sent message by message instead.
func (o *Outlet[T]) SendBatch(ctx context.Context, b *Batch[T]) error {
	if len(b.Items) == 0 {
		b.Release()
		return nil
	}
	if len(b.Items) > o.max || (o.cur != nil && len(o.cur.Items)+len(b.Items) <= o.max) {
		// Too big for this pipe, or small enough to join the batch being
		// built (keeping batches full when inputs trickle).
		for i := range b.Items {
			if err := o.Send(ctx, b.Items[i]); err != nil {
				return err
			}
		}
		b.Release()
		return nil
	}
	if err := o.Flush(ctx); err != nil {
		return err
	}
	o.cur = b
	return nil
}

// Flush hands on the batch being built, if any, waiting for room in the
// pipe.
func (o *Outlet[T]) Flush(ctx context.Context) error {
	b := o.cur
	if b == nil || len(b.Items) == 0 {
		return nil
	}
	n := int64(len(b.Items))
	// A stage reading it may shorten Items (a filter keeping some in
	// place): put must still know how far this use filled it.
	b.dirty = max(b.dirty, len(b.Items))
	o.p.buffered.Add(n)
	select {
	case o.p.ch <- b:
	default:
		// The pipe is full: the stage waits for downstream. The time it
		// waits is the backpressure signal.
		began := time.Now()
		select {
		case o.p.ch <- b:
		case <-ctx.Done():
			o.p.buffered.Add(-n)
			return ctx.Err()
		case <-o.p.readerDone:
			o.p.buffered.Add(-n)
			return ErrDownstreamClosed
		}
		o.node.stats.blocked.Add(int64(time.Since(began)))
	}
	o.cur = nil
	if !o.failure {
		o.node.stats.out.Add(n)
	}
	return nil
}

// C returns the channel that takes whole batches, for stages that must
// wait on their output and something else at once (a buffer that keeps
// reading while its output is full). After a batch was sent on C, call Sent
// with the number of messages it held, counted before sending: once sent,
// the batch belongs to the next stage.
func (o *Outlet[T]) C() chan<- *Batch[T] { return o.p.ch }

// Sent records a batch of n messages handed on through C.
func (o *Outlet[T]) Sent(n int) {
	o.p.buffered.Add(int64(n))
	o.node.stats.out.Add(int64(n))
}

// Closed is closed when the stage reading this output has ended.
func (o *Outlet[T]) Closed() <-chan struct{} { return o.p.readerDone }

// NewBatch returns an empty recycled batch, to fill and send on C.
func (o *Outlet[T]) NewBatch() *Batch[T] {
	b := o.p.pool.get()
	// Sent on C, it is never flushed, so nothing learns how far it will be
	// filled: its release clears every slot past what its reader kept.
	b.dirty = cap(b.Items)
	return b
}

// BatchSize returns the most messages one batch of this output holds.
func (o *Outlet[T]) BatchSize() int { return o.max }

// discard drops the batch being built without settling it: used when a
// stage failed, so that its messages stay unsettled and are replayed.
func (o *Outlet[T]) discard() {
	if o.cur != nil {
		o.cur.Release()
		o.cur = nil
	}
}

package stream

import (
	"sync"
	"sync/atomic"
	"time"
)

// Header is one record header, as Kafka carries them.
type Header struct {
	Key   string
	Value []byte
}

// Message is one element moving through a pipeline: the value plus the
// envelope its source gave it. Stages carry the envelope over to their
// outputs so that the message can be settled where it leaves the pipeline.
type Message[T any] struct {
	Value T
	Envelope
}

// Envelope is everything about a message except its value. It is a
// separate type so that a stage changing the value's type copies it in one
// assignment (dst.Envelope = src.Envelope).
type Envelope struct {
	Key     []byte
	Headers []Header
	// Topic, Partition and Offset say where the source read the message; they
	// are zero for sources without positions.
	Topic     string
	Partition int32
	// Attempt counts processing attempts made so far (0 before the first).
	Attempt int32
	// Priority is the message's level of priority, 0 the highest: set by
	// a priority source (source.Priority) or a stage that derives it, 0
	// when nothing set it.
	Priority uint8
	// AppendTime reports that Timestamp is when the broker appended the
	// message to its log, on the broker's clock (a Kafka topic whose
	// message.timestamp.type is LogAppendTime), rather than a time its
	// producer chose (CreateTime, and the default, false). Aging by
	// priority counts a message's wait from such a Timestamp, so that
	// the time it waited in the broker counts, and from when it was
	// received otherwise: a producer's clock may be behind, or its data a
	// backfill, and the message would look as if it had waited for ages.
	AppendTime bool
	Offset     int64
	Timestamp  time.Time

	handle Handle
}

// NewMessage returns a message carrying v and settled through h.
func NewMessage[T any](v T, h Handle) Message[T] {
	return Message[T]{Value: v, Envelope: Envelope{handle: h}}
}

// Handle returns the message's settle handle.
func (e *Envelope) Handle() Handle { return e.handle }

// SetHandle replaces the message's settle handle. Stages that combine or
// split messages (batching, fan-out) use it with Join and Fanout.
func (e *Envelope) SetHandle(h Handle) { e.handle = h }

// Settle settles the message through its handle. Call it exactly once per
// message, where the message leaves the pipeline.
func (e *Envelope) Settle(o Outcome) { e.handle.Settle(o) }

// Header returns the value of the first header named key, or nil.
func (e *Envelope) Header(key string) []byte {
	for _, h := range e.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// WithValue returns a message that carries v and the whole envelope of m
// (key, headers, position, attempt, settle handle). Flows use it to emit the
// result computed from m.
func WithValue[T, U any](m Message[T], v U) Message[U] {
	return Message[U]{Value: v, Envelope: m.Envelope}
}

// Outcome says how a message left the pipeline. Outcomes are ordered from the
// mildest to the most severe; a message split into parts (Fanout) is settled
// with the most severe outcome of its parts.
type Outcome uint8

const (
	// Filtered: a stage deliberately removed the message.
	Filtered Outcome = iota + 1
	// Completed: a sink processed the message.
	Completed
	// Dropped: an overflow strategy discarded the message.
	Dropped
	// Parked: the message failed transiently, ran out of retries, and was
	// written to a parking queue from which it is replayed later.
	Parked
	// DeadLettered: the message failed and was written to a dead letter or
	// failure queue with its reason.
	DeadLettered
)

var outcomeNames = [...]string{"invalid", "filtered", "completed", "dropped", "parked", "dead_lettered"}

// String returns the outcome's name, as used in metric labels.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "invalid"
}

// Settler is told when messages it issued are settled. id is the number the
// settler gave the message (an offset, a sequence number).
type Settler interface {
	Settle(id int64, o Outcome)
}

// BatchSettler is implemented by settlers that settle many ids under one
// lock; SettleAll uses it.
type BatchSettler interface {
	Settler
	SettleBatch(ids []int64, o Outcome)
}

// SettleAll settles every message of ms with outcome o. Runs of messages
// from the same settler that implements BatchSettler are settled with one
// call, which is what sinks should use on the hot path.
func SettleAll[T any](ms []Message[T], o Outcome) {
	buf := idBufs.Get().(*[]int64)
	settleAll(ms, o, buf)
	idBufs.Put(buf)
}

// idBufs recycles the id buffers of SettleAll: handed to an interface
// method, a stack buffer would escape and cost an allocation per call.
var idBufs = sync.Pool{New: func() any { b := make([]int64, 0, 256); return &b }}

func settleAll[T any](ms []Message[T], o Outcome, buf *[]int64) {
	for i := 0; i < len(ms); {
		s := ms[i].handle.s
		bs, ok := s.(BatchSettler)
		if !ok {
			ms[i].handle.Settle(o)
			i++
			continue
		}
		ids := (*buf)[:0]
		for i < len(ms) && ms[i].handle.s == s && len(ids) < cap(ids) {
			ids = append(ids, ms[i].handle.id)
			i++
		}
		bs.SettleBatch(ids, o)
		*buf = ids
	}
}

// Handle settles one message. The zero Handle settles nothing: messages from
// sources that track no positions carry it.
type Handle struct {
	s  Settler
	id int64
}

// NewHandle returns a handle that reports id to s when settled.
func NewHandle(s Settler, id int64) Handle { return Handle{s: s, id: id} }

// Settle reports the outcome to the handle's settler, if any.
func (h Handle) Settle(o Outcome) {
	if h.s != nil {
		h.s.Settle(h.id, o)
	}
}

// Settler returns the settler the handle reports to, nil for the zero
// handle. Settlers are compared with ==, so implementations are pointer
// types.
func (h Handle) Settler() Settler { return h.s }

// Assignment is implemented by the settler a source gives every message
// of one assignment of one partition, a new one each time the partition
// is assigned to the reader again (the Kafka sources' settlers are). A
// stage that keeps state per partition, such as a window, needs it: the
// messages of two assignments must not be mixed (the later one replays
// from a checkpoint, perhaps another owner's, what the earlier one left
// unsettled), and the state of a partition no longer read must go when
// it is taken away, not when it comes back.
type Assignment interface {
	Settler
	// Ended returns a channel closed once the assignment is over: the
	// partition was revoked, lost or stopped here. Settles addressed to
	// it are ignored from then on; whoever reads the partition next
	// replays what it left unsettled.
	Ended() <-chan struct{}
}

// Assignment returns the assignment the handle's message was read under:
// its settler if that is an Assignment, else that of the handle it was
// split from (Fanout), that of the handle it wraps (a Wrapper's), or, if
// all agree, of the handles it joins (Join); nil if there is none (a
// source without assignments).
func (h Handle) Assignment() Assignment {
	switch s := h.s.(type) {
	case Assignment:
		return s
	case *fanout:
		return s.parent.Assignment()
	case *joined:
		return s.assignment
	case Wrapper:
		return s.Wrapped().Assignment()
	}
	return nil
}

// Wrapper is implemented by a settler that a stage gives a message in
// place of its handle, and that settles that handle in turn (as
// backpressure.PartitionLimit's does, to learn when its messages are
// settled): Wrapped returns the handle it settles. Handle.Assignment sees
// through it, so that a stage after it that keeps state per assignment (a
// window) still tells a partition's assignments apart.
type Wrapper interface {
	Settler
	Wrapped() Handle
}

// IsZero reports whether the handle settles nothing.
func (h Handle) IsZero() bool { return h.s == nil }

// ID returns the number the handle reports to its settler.
func (h Handle) ID() int64 { return h.id }

// Fanout returns a handle to be settled n times, once by each of the n
// messages that one message became (flat-map, broadcast): h is settled,
// with the most severe of their outcomes, when the last of them is. For
// n <= 0 it settles h as Filtered at once; for n == 1 it returns h.
func Fanout(h Handle, n int) Handle {
	switch {
	case n <= 0:
		h.Settle(Filtered)
		return Handle{}
	case n == 1 || h.IsZero():
		return h
	}
	f := &fanout{parent: h}
	f.left.Store(int32(n))
	return Handle{s: f}
}

type fanout struct {
	parent Handle
	left   atomic.Int32
	worst  atomic.Uint32
}

func (f *fanout) Settle(_ int64, o Outcome) {
	for {
		w := f.worst.Load()
		if uint32(o) <= w || f.worst.CompareAndSwap(w, uint32(o)) {
			break
		}
	}
	if f.left.Add(-1) == 0 {
		f.parent.Settle(Outcome(f.worst.Load()))
	}
}

// Join returns one handle that settles all of hs with the same outcome. Use
// it when several messages become one (batching, windows). Runs of handles
// from one settler that implements BatchSettler are settled with one call.
func Join(hs []Handle) Handle {
	live := make([]Handle, 0, len(hs))
	for _, h := range hs {
		if !h.IsZero() {
			live = append(live, h)
		}
	}
	switch len(live) {
	case 0:
		return Handle{}
	case 1:
		return live[0]
	}
	a := live[0].Assignment()
	for _, h := range live[1:] {
		if a == nil {
			break
		}
		if h.s != live[0].s && h.Assignment() != a {
			a = nil
		}
	}
	return Handle{s: &joined{hs: live, assignment: a}}
}

// joined is a pointer type so that Handle.Settler values stay comparable.
type joined struct {
	hs         []Handle
	assignment Assignment // shared by every handle of hs, or nil
}

func (j *joined) Settle(_ int64, o Outcome) {
	buf := idBufs.Get().(*[]int64)
	hs := j.hs
	for i := 0; i < len(hs); {
		bs, ok := hs[i].s.(BatchSettler)
		if !ok {
			hs[i].Settle(o)
			i++
			continue
		}
		s := hs[i].s
		ids := (*buf)[:0]
		for i < len(hs) && hs[i].s == s && len(ids) < cap(ids) {
			ids = append(ids, hs[i].id)
			i++
		}
		bs.SettleBatch(ids, o)
		*buf = ids
	}
	idBufs.Put(buf)
}

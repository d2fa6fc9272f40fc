package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// Sent records what was sent: the requests the brokers acknowledged, and
// apart from them those whose acknowledgement never came (Unconfirmed). A
// request the brokers refused, or that the client gave up on before
// sending it, was not written: it is not recorded.
type Sent struct {
	mu          sync.Mutex
	kinds       map[string]Kind  // acknowledged, by delivery id (malformed ones under a synthetic key)
	at          map[string]int64 // when each acknowledged one was produced, Unix milliseconds
	unconfirmed map[string]Kind  // sent, never answered, and not acknowledged in another copy
	duplicates  int
	total       atomic.Int64
	levels      [delivery.Levels]atomic.Int64
	notWritten  atomic.Int64
	produced    atomic.Int64 // handed to the client, answered or not
	failed      atomic.Int64 // answered with an error
}

// Levels returns how many requests of each level of priority the brokers
// acknowledged, duplicates included (to the level's topic, with Topics).
func (s *Sent) Levels() [delivery.Levels]int64 {
	var n [delivery.Levels]int64
	for l := range n {
		n[l] = s.levels[l].Load()
	}
	return n
}

// NewSent returns an empty record.
func NewSent() *Sent {
	return &Sent{kinds: map[string]Kind{}, at: map[string]int64{}, unconfirmed: map[string]Kind{}}
}

// Total returns how many requests the brokers acknowledged (duplicates
// included).
func (s *Sent) Total() int64 { return s.total.Load() }

// Produced returns how many requests were handed to the producer so
// far, whatever their answer: acknowledged, failed or still unanswered.
func (s *Sent) Produced() int64 { return s.produced.Load() }

// Failed returns how many requests the client answered with an error so
// far: refused by the brokers, or given up before they were written.
func (s *Sent) Failed() int64 { return s.failed.Load() }

// NotWritten returns how many requests were not written: the brokers
// refused them, or the client gave up on them before sending them (the
// load stopped or was interrupted). They are not recorded.
func (s *Sent) NotWritten() int64 { return s.notWritten.Load() }

// reserve makes room for n requests in an empty record, so that recording
// does not rehash a growing map at full rate.
func (s *Sent) reserve(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.kinds) == 0 && n > 0 {
		s.kinds = make(map[string]Kind, min(n, 10_000_000))
		s.at = make(map[string]int64, min(n, 10_000_000))
	}
}

// acknowledged records a request the brokers acknowledged: the first copy
// of its id is the request, any later one a duplicate.
func (s *Sent) acknowledged(p pend) {
	s.mu.Lock()
	if _, ok := s.kinds[p.key]; ok {
		s.duplicates++
	} else {
		s.kinds[p.key] = p.kind
		s.at[p.key] = p.at
		delete(s.unconfirmed, p.key)
	}
	s.mu.Unlock()
	s.total.Add(1)
	s.levels[p.level].Add(1)
}

// unanswered records a request whose outcome is unknown, unless another
// copy of it was acknowledged.
func (s *Sent) unanswered(p pend) {
	s.mu.Lock()
	if _, ok := s.kinds[p.key]; !ok {
		s.unconfirmed[p.key] = p.kind
	}
	s.mu.Unlock()
}

// Distinct returns how many different requests the brokers acknowledged.
func (s *Sent) Distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kinds)
}

// Kinds returns the expected outcome per request id the brokers
// acknowledged, and the number of duplicates among them.
func (s *Sent) Kinds() (map[string]Kind, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]Kind, len(s.kinds))
	for k, v := range s.kinds {
		m[k] = v
	}
	return m, s.duplicates
}

// SentAt returns when request id was handed to the producer (its
// record's timestamp, to the millisecond): the start of its end-to-end
// latency. The zero time if the brokers did not acknowledge it, or the
// record was read from a file that did not say (an earlier version).
func (s *Sent) SentAt(id string) time.Time {
	s.mu.Lock()
	ms := s.at[id]
	s.mu.Unlock()
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Unconfirmed returns the requests that were sent but never answered (the
// load generator stopped waiting: FlushTimeout, an interruption), by id,
// with what each is expected to become: the brokers may hold them or not.
// A verification cannot expect them; it can judge those that reached the
// workers.
func (s *Sent) Unconfirmed() map[string]Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]Kind, len(s.unconfirmed))
	for k, v := range s.unconfirmed {
		m[k] = v
	}
	return m
}

// pend is a request produced and not yet answered.
type pend struct {
	key   string
	kind  Kind
	level int
	at    int64 // when it was produced, Unix milliseconds
}

// acks follows the requests produced until the brokers answer them, and
// records each answer in sent.
type acks struct {
	ctx  context.Context // the produces'
	sent *Sent
	// idempotent: the client fails a record only if it was never sent, or
	// the broker answered with an error, so a failed record was not
	// written. Without idempotence a failed record may have been.
	idempotent bool
	// who acknowledges, for messages: the brokers or the server.
	who string

	mu      sync.Mutex
	pending map[int]pend // by sequence number
	sealed  bool         // answers that come later are not recorded
	refused int64
	first   error // the first refusal, with its topic
}

// newAcks follows the answers of p: a Kafka client's idempotent writes
// fail only records not written; another producer (a Redis stream's
// writer, whose reply can be lost after the write) is taken as not
// idempotent.
func newAcks(ctx context.Context, p kafkasink.Producer, sent *Sent) *acks {
	a := &acks{ctx: ctx, sent: sent, who: "the server", pending: map[int]pend{}}
	if cl, ok := p.(*kgo.Client); ok {
		off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool)
		a.idempotent, a.who = !off, "the brokers"
	}
	return a
}

// add notes the chunk of requests numbered from first as produced.
func (a *acks) add(chunk []made, first int) {
	// One time for the chunk: a millisecond's worth of requests, which
	// the producer stamps alike.
	at := time.Now().UnixMilli()
	a.mu.Lock()
	for i, m := range chunk {
		a.pending[first+i] = pend{key: m.key, kind: m.kind, level: m.level, at: at}
	}
	a.mu.Unlock()
	a.sent.produced.Add(int64(len(chunk)))
}

// failed reports whether the brokers refused a request: the load stops.
func (a *acks) failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.first != nil
}

// done records the answer to request id, produced as rec (a produce
// promise).
func (a *acks) done(id int, rec *kgo.Record, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pending[id]
	if !ok || a.sealed {
		return
	}
	delete(a.pending, id)
	if err != nil {
		a.sent.failed.Add(1)
	}
	switch {
	case err == nil:
		a.sent.acknowledged(p)
		return
	case !a.idempotent:
		a.sent.unanswered(p) // it may have been written before it failed
	default:
		a.sent.notWritten.Add(1)
	}
	// Given up by the load generator itself (interrupted, or out of
	// time), it is not a refusal.
	if a.ctx.Err() == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		a.refused++
		if a.first == nil {
			a.first = fmt.Errorf("the first, to topic %q: %w", rec.Topic, err)
		}
	}
}

// seal records every request still unanswered as unconfirmed, ignores
// the answers that come later, and returns Run's error: the brokers'
// refusals, the requests left unanswered, an interruption.
func (a *acks) seal(ctx context.Context, cfg Config, flushErr error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sealed = true
	for _, p := range a.pending {
		a.sent.unanswered(p)
	}
	var errs []error
	refusedNotWritten := int64(0)
	switch {
	case a.first != nil && a.idempotent:
		refusedNotWritten = a.refused
		errs = append(errs, fmt.Errorf("loadgen: %s refused %d requests (not recorded) and the load stopped: %w", a.who, a.refused, a.first))
	case a.first != nil:
		errs = append(errs, fmt.Errorf("loadgen: %d requests failed (recorded as unconfirmed: %s may hold them or not) "+
			"and the load stopped: %w", a.refused, a.who, a.first))
	}
	switch n := len(a.pending); {
	case ctx.Err() != nil:
		errs = append(errs, fmt.Errorf("loadgen: interrupted, %d requests not sent and %d not acknowledged "+
			"(recorded as unconfirmed: %s may hold them or not): %w", a.sent.NotWritten()-refusedNotWritten, n, a.who, ctx.Err()))
	case n > 0:
		errs = append(errs, fmt.Errorf("loadgen: %d requests not acknowledged %v after the load, recorded as unconfirmed "+
			"(%s may hold them or not): %w", n, cfg.FlushTimeout, a.who, flushErr))
	}
	return errors.Join(errs...)
}

package delivery

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/stream"
)

// StepStore keeps a durable record of the non-idempotent steps each request
// started and completed (mode b: recorded steps; mode a, PUT by delivery id,
// needs none). A replayed request reads it and skips what was done; a step
// started and never finished (the worker crashed mid-call, or an attempt was
// cut short) has an unknown outcome and is compensated rather than risked
// twice.
type StepStore interface {
	// Begin marks a request's step started by mark (which names the
	// caller's copy of the request) unless the step has a record already,
	// and returns the record as it was — atomically — with the age of a
	// mark it found by the store's clock (StepState.Age): the age of a
	// mark must not depend on whose clock reads it.
	Begin(ctx context.Context, id string, step Step, mark string) (StepState, error)
	// Record notes that a request completed a step, with the value it
	// returned (the drone id of schedule_drone).
	Record(ctx context.Context, id string, step Step, value string) error
	// Abandon removes the started mark of mark (the caller's copy) whose
	// call certainly did not act (the service answered no), so that the
	// step may be called again; a record that another copy took over, or
	// recorded done, is left as it is.
	Abandon(ctx context.Context, id string, step Step, mark string) error
	// TakeOver replaces the started mark from (as Begin returned it) with
	// mark, unless the record changed meanwhile (another copy took it over,
	// or recorded it done): it reports whether it did. A copy takes over a
	// step whose starter is gone and whose call the service says did not
	// act.
	TakeOver(ctx context.Context, id string, step Step, from StepState, mark string) (bool, error)
}

// StepState is the record of one step of one request.
type StepState struct {
	Done      bool
	Value     string // recorded with Done
	StartedBy string // the mark of the copy that started it, if not done
	// Age is how long ago the mark was written, by the store's clock (not
	// the reader's: the workers' clocks may disagree); negative if the
	// record does not say.
	Age time.Duration

	raw string // the record as stored, for TakeOver
}

// RedisSteps is a StepStore in Redis: one string per request and step
// ("sluice:steps:<id>:<step>" = "s:<mark>" once started, "d:<value>" once
// done), expiring TTL after the step began. Begin is SET NX GET (Redis 7+),
// Record a SET that keeps the TTL: two commands per step.
//
// The keys are spread over stepBatchers batchers, each with one round trip
// in flight at a time, so that a key's operations reach Redis in the order
// they came. An operation whose batcher has nothing in flight is sent by
// its caller at once, from its own goroutine: at a few hundred requests a
// second nearly every one is, and handing it to a batcher goroutine and
// its answer back cost more than the round trip (BenchmarkStepRecords).
// The operations that come while a round trip is in flight wait for it,
// and then go together in one pipeline, sent by the batcher's goroutine:
// whatever is waiting, one round trip, so that under load a step costs a
// fraction of one. While one batcher waits for its round trip (with
// appendfsync always, Redis's write to disk), the others send theirs.
//
// A caller whose operation is queued stops waiting when its context ends,
// and the operation still lands, before the next one of its key: an
// Abandon whose caller gave up lands before the next Begin of its step. A
// caller that sends its own operation waits for its round trip and
// returns its answer even if its context ended meanwhile: the client's
// read and write timeouts bound each try, and go-redis tries again within
// the store's 5 s for a round trip (a Redis that never answers holds the
// caller 5 s, one that refuses connections 2.5 to 3.5 s, with go-redis'
// defaults). A client whose reads or writes may wait without a limit
// (ReadTimeout or WriteTimeout -1 or -2, unless ContextTimeoutEnabled
// with -1), or whose type does not say, has every operation sent by its
// batcher's goroutine instead, so that its caller can stop waiting.
type RedisSteps struct {
	cl       redis.UniversalClient
	ttl      time.Duration
	seed     maphash.Seed
	direct   bool // a caller may send its own operation (boundedRoundTrips)
	batchers []*stepBatcher
	stop     chan struct{}
	// closed is closed once every batcher has stopped (Close).
	closed chan struct{}
	wg     sync.WaitGroup // the batchers' goroutines
	// sending counts the operations their callers are sending, which
	// Close waits for.
	sending sync.WaitGroup
}

// stepBatcher orders the operations of the keys it holds: at most one
// round trip in flight (busy), the operations that came meanwhile queued.
type stepBatcher struct {
	mu      sync.Mutex
	busy    bool          // a round trip is in flight, or queued operations are to be sent by run
	queued  []*stepOp     // in the order they came; non-empty only while busy
	closing bool          // Close began: no operation is taken any more
	wake    chan struct{} // tells run that queued operations are its to send
}

// maxQueued is how many operations may wait behind a batcher's round trip
// in flight: more are refused with a transient error (the step store is
// unavailable for them, as when Redis refuses), not queued.
const maxQueued = 1024

// stepBatchers is how many batchers a RedisSteps runs. A saturated
// delivery scheduler had every schedule_drone call in flight (about 300)
// waiting on its one batcher, whose round trips followed one another.
const stepBatchers = 4

// stepOp is one operation waiting for its batch.
type stepOp struct {
	kind  opKind
	key   string
	value string
	old   *redis.StatusCmd   // Begin: the record before
	ttl   *redis.DurationCmd // age: the TTL the record has left
	cmd   redis.Cmder
	err   chan error
	alone [1]*stepOp // the batch of an operation its caller sends
}

type opKind uint8

const (
	opBegin opKind = iota
	opAge
	opRecord
	opAbandon
)

// NewRedisSteps returns a step store on cl whose records live for ttl
// (default 24h: longer than any replay). Close it when done.
//
// It does not reach the server: call CheckRedis first, so that an
// unreachable or pre-7.0 Redis is named before any request waits on it.
// Give it to SchedulerConfig.Steps with the steps to record in
// NonIdempotent, and a StaleAfter of at least MinStaleAfter(Retry) (the
// default 10 s is). Keep cl's read and write timeouts finite (see
// RedisSteps); while Redis does not answer, the scheduler waits for it up
// to SchedulerConfig.MaxStoreOutage and then stops with ErrStoreOutage.
func NewRedisSteps(cl redis.UniversalClient, ttl time.Duration) *RedisSteps {
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	s := &RedisSteps{cl: cl, ttl: ttl, seed: maphash.MakeSeed(), direct: boundedRoundTrips(cl),
		stop: make(chan struct{}), closed: make(chan struct{})}
	for range stepBatchers {
		b := &stepBatcher{wake: make(chan struct{}, 1)}
		s.batchers = append(s.batchers, b)
		s.wg.Go(func() { s.run(b) })
	}
	return s
}

// boundedRoundTrips reports whether every round trip of cl ends within a
// limit whatever Redis does (answers, refuses, or takes the request and
// never answers): its reads and writes have timeouts, or follow the
// deadline of send's context. Its options are normalized: a timeout above
// 0 is one; 0 is none but for a context's deadline, which the client
// follows if ContextTimeoutEnabled; below 0, no deadline is ever set. A
// client of another type (a Ring's shards set their own) does not say.
func boundedRoundTrips(cl redis.UniversalClient) bool {
	var read, write time.Duration
	var ctxDeadlines bool
	switch c := cl.(type) {
	case *redis.Client:
		o := c.Options()
		read, write, ctxDeadlines = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		read, write, ctxDeadlines = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	default:
		return false
	}
	bounded := func(d time.Duration) bool { return d > 0 || (d == 0 && ctxDeadlines) }
	return bounded(read) && bounded(write)
}

// CheckRedis makes sure the server at cl answers and can keep step records:
// Begin needs SET with both NX and GET, which Redis has since 7.0. It names
// the problem: an unreachable server, or one too old.
func CheckRedis(ctx context.Context, cl redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cl.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis does not answer: %w", err)
	}
	const probe = "sluice:steps:probe"
	err := cl.SetArgs(ctx, probe, "s:probe", redis.SetArgs{Mode: "NX", Get: true, TTL: 10 * time.Second}).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis cannot keep step records (SET NX GET needs Redis 7.0 or later): %w", err)
	}
	return nil
}

func stepKey(id string, step Step) string { return "sluice:steps:" + id + ":" + string(step) }

// A started record is "s:<mark>", written with the records' TTL; its age
// is the TTL it was written with less the TTL it has left, both on the
// store's clock: the workers' clocks may disagree by more than a mark's
// staleness, the store's is one clock for all of them. (Records written
// by earlier versions, "s:<mark>@<unix ms>", are read alike.)

// Begin marks the step started unless it has a record, and returns the
// record as it was.
func (s *RedisSteps) Begin(ctx context.Context, id string, step Step, mark string) (StepState, error) {
	for range beginReads {
		st, gone, err := s.begin(ctx, id, step, mark)
		if !gone {
			return st, err
		}
	}
	return StepState{}, stream.Transient(fmt.Errorf("reading the %s record of %s: a mark went between its read and its age's %d times",
		step, id, beginReads))
}

// beginReads is how many times Begin reads a record again whose mark went
// between the read and the read of its age.
const beginReads = 3

// begin is one try of Begin. gone says that the mark it found had gone
// when its age was read: its copy abandoned it (the service said no), and
// may have begun the step again since, under the same mark; the record is
// read again.
func (s *RedisSteps) begin(ctx context.Context, id string, step Step, mark string) (st StepState, gone bool, err error) {
	op := &stepOp{kind: opBegin, key: stepKey(id, step), value: "s:" + mark}
	if err := s.do(ctx, op); err != nil {
		return StepState{}, false, fmt.Errorf("reading the %s record of %s: %w", step, id, err)
	}
	old, err := op.old.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return StepState{}, false, nil
	case err != nil:
		return StepState{}, false, fmt.Errorf("reading the %s record of %s: %w", step, id, err)
	}
	if v, ok := strings.CutPrefix(old, "d:"); ok {
		return StepState{Done: true, Value: v, raw: old}, false, nil
	}
	if m, ok := strings.CutPrefix(old, "s:"); ok {
		st := StepState{StartedBy: m, raw: old}
		if i := strings.LastIndexByte(m, '@'); i >= 0 {
			st.StartedBy = m[:i]
		}
		st.Age, gone, err = s.age(ctx, op.key)
		if err != nil {
			return StepState{}, false, fmt.Errorf("reading the age of the %s record of %s: %w", step, id, err)
		}
		return st, gone, nil
	}
	return StepState{}, false, fmt.Errorf("the %s record of %s holds %q, not a step record", step, id, old)
}

// age is how long ago key's started mark was written, by the TTL it has
// left, or -1 if the TTL does not say. Begin asks only when it found a
// mark, in a round trip of its own: nearly every step is begun afresh, and
// a PTTL in every Begin's round trip was a third of the step records'
// commands. The record may change in between: a take-over gives it a
// fresh TTL (it reads younger: waited for longer), a record keeps the TTL.
// A mark gone is not old (gone): its copy, told no by the service,
// abandoned it and may have begun again under the same mark, which a
// take-over of the mark read would replace while that copy's call is in
// flight. An age that cannot be read is an error, not an old mark, for
// the same reason.
func (s *RedisSteps) age(ctx context.Context, key string) (age time.Duration, gone bool, err error) {
	op := &stepOp{kind: opAge, key: key}
	if err := s.do(ctx, op); err != nil {
		return 0, false, err
	}
	left, err := op.ttl.Result()
	switch {
	case err != nil:
		return 0, false, err
	case left == -2: // no such key
		return 0, true, nil
	case left > 0 && left <= s.ttl:
		return s.ttl - left, false, nil
	}
	return -1, false, nil
}

// takeOver sets KEYS[1] to ARGV[2], with a fresh TTL of ARGV[3] ms (its
// age starts again), if it holds ARGV[1].
var takeOver = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
	return 1
end
return 0`)

// TakeOver replaces the started mark from with mark, if the record still
// holds from.
func (s *RedisSteps) TakeOver(ctx context.Context, id string, step Step, from StepState, mark string) (bool, error) {
	if from.raw == "" || from.Done {
		return false, fmt.Errorf("taking over the %s record of %s: %+v is no started record read by Begin", step, id, from)
	}
	n, err := takeOver.Run(ctx, s.cl, []string{stepKey(id, step)}, from.raw, "s:"+mark, s.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("taking over the %s record of %s: %w", step, id, err)
	}
	return n == 1, nil
}

// Record writes that a request completed a step.
func (s *RedisSteps) Record(ctx context.Context, id string, step Step, value string) error {
	return s.write(ctx, &stepOp{kind: opRecord, key: stepKey(id, step), value: "d:" + value})
}

// abandon deletes KEYS[1] if it is the started mark ARGV[1] ("s:<mark>",
// or an earlier version's "s:<mark>@<ms>").
var abandon = redis.NewScript(`local v = redis.call("GET", KEYS[1])
if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "@") then
	redis.call("DEL", KEYS[1])
	return 1
end
return 0`)

// Abandon removes the started mark of mark, if the record still holds it.
func (s *RedisSteps) Abandon(ctx context.Context, id string, step Step, mark string) error {
	return s.write(ctx, &stepOp{kind: opAbandon, key: stepKey(id, step), value: "s:" + mark})
}

func (s *RedisSteps) write(ctx context.Context, op *stepOp) error {
	if err := s.do(ctx, op); err != nil {
		return fmt.Errorf("writing step record %s: %w", op.key, err)
	}
	return nil
}

// do sends op, or queues it behind the round trip in flight of its
// batcher, and returns its answer.
func (s *RedisSteps) do(ctx context.Context, op *stepOp) error {
	b := s.batchers[maphash.String(s.seed, op.key)%uint64(len(s.batchers))]
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return errStepsClosed
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return err
	}
	if !b.busy && s.direct {
		// Nothing in flight nor queued: the caller sends it.
		b.busy = true
		s.sending.Add(1)
		b.mu.Unlock()
		s.sendOwn(b, op)
		return op.result(1)
	}
	if n := len(b.queued); n >= maxQueued {
		// A round trip that does not end, and callers that gave up
		// queueing again: refused rather than queued without end, to
		// land in Redis, every one, when it answers.
		b.mu.Unlock()
		return stream.Transient(fmt.Errorf("%d step operations already wait behind a round trip to Redis", n))
	}
	answer := answers.Get().(chan error)
	op.err = answer
	b.queued = append(b.queued, op)
	if !b.busy {
		// The client's round trips may wait without a limit: run sends
		// it, and this caller can stop waiting when its context ends.
		b.busy = true
		b.wakeRun()
	}
	b.mu.Unlock()
	select {
	case err := <-op.err:
		answers.Put(answer) // its one answer taken: empty, and nobody sends on it again
		return err
	case <-ctx.Done():
		// The batcher answers later, on this channel: it is not reused,
		// or that answer would reach another operation.
		return ctx.Err()
	case <-s.closed:
		// Every operation queued was answered when the store closed.
		select {
		case err := <-op.err:
			answers.Put(answer)
			return err
		default:
			return errStepsClosed
		}
	}
}

// sendOwn sends op, which its caller sends itself, and then hands what
// was queued meanwhile to run, or lets the batcher go. It does so even if
// the round trip panics (in a hook of the client): the panic goes on to
// the caller, whose MapAsync fails that one request and goes on, and the
// batcher must not stay busy for good, every later operation of its keys
// queued and never sent, and Close waiting for this one.
func (s *RedisSteps) sendOwn(b *stepBatcher, op *stepOp) {
	defer func() {
		b.mu.Lock()
		if len(b.queued) > 0 {
			b.wakeRun() // run takes the queue, busy until it is sent
		} else {
			b.busy = false
		}
		b.mu.Unlock()
		s.sending.Done()
	}()
	op.alone[0] = op
	s.send(op.alone[:])
}

// wakeRun tells run, with b.mu held, that the queue is its to send. The
// wake-up is empty (run took the last one before it last let busy go),
// but a send that cannot block costs nothing to make sure.
func (b *stepBatcher) wakeRun() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// answers are the channels queued operations wait for their answer on,
// reused: a channel made per operation was one of a step's allocations.
// A channel goes back only once empty with no answer to come (the
// operation's one answer taken).
var answers = sync.Pool{New: func() any { return make(chan error, 1) }}

// errStepsClosed fails an operation on a closed step store.
var errStepsClosed = errors.New("step store closed")

// run sends, while woken for them, the operations queued behind a round
// trip: the whole queue (at most maxQueued) in one pipeline, until none
// is. The queue and the batch trade places, so neither is copied.
func (s *RedisSteps) run(b *stepBatcher) {
	batch := make([]*stepOp, 0, maxQueued)
	for {
		select {
		case <-b.wake:
		case <-s.stop:
			return
		}
		for {
			b.mu.Lock()
			if len(b.queued) == 0 || b.closing { // closing: Close answers the queue
				b.busy = false
				b.mu.Unlock()
				break
			}
			batch, b.queued = b.queued, batch[:0]
			b.mu.Unlock()
			s.send(batch)
			for _, op := range batch {
				op.err <- op.result(len(batch))
			}
			clear(batch)
		}
	}
}

// send sends batch in one pipeline.
func (s *RedisSteps) send(batch []*stepOp) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, op := range batch {
			switch op.kind {
			case opBegin:
				op.old = p.SetArgs(ctx, op.key, op.value, redis.SetArgs{Mode: "NX", Get: true, TTL: s.ttl})
				op.cmd = op.old
			case opAge:
				op.ttl = p.PTTL(ctx, op.key)
				op.cmd = op.ttl
			case opRecord:
				op.cmd = p.SetArgs(ctx, op.key, op.value, redis.SetArgs{KeepTTL: true})
			case opAbandon:
				op.cmd = abandon.Eval(ctx, p, []string{op.key}, op.value)
			}
		}
		return nil
	})
}

// result is op's own command's error, once sent in a batch of n (a nil
// reply is not one: SET NX GET answers nil for a step with no record).
func (op *stepOp) result(n int) error {
	err := op.cmd.Err()
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return nil
	case n > 1:
		return fmt.Errorf("a batch of %d step operations: %w", n, err)
	}
	return err
}

// Close stops the batchers: the operations queued fail, those in flight
// are answered, and Close returns once they are.
func (s *RedisSteps) Close() {
	for _, b := range s.batchers {
		b.mu.Lock()
		b.closing = true
		queued := b.queued
		b.queued = nil
		b.mu.Unlock()
		for _, op := range queued {
			op.err <- errStepsClosed
		}
	}
	s.sending.Wait()
	close(s.stop)
	s.wg.Wait()
	close(s.closed)
}

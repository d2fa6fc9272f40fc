package ownership

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Assignable is a source whose partitions a Balancer starts and stops
// (source/kafka's Assigned is one).
type Assignable interface {
	// Partitions lists the stream's partitions.
	Partitions(ctx context.Context) ([]int32, error)
	// Start reads a partition from offset (the next record to deliver),
	// or from the source's configured start if offset < 0, as a new
	// assignment of it.
	Start(partition int32, offset int64)
	// Stop stops a partition at once: nothing of it is emitted after Stop
	// returns, settles of its records delivered before are ignored, and
	// Settled no longer reports it.
	Stop(partition int32)
	// Settled returns the offset below which every record of the
	// partition's current assignment is settled, false if it is not read
	// or delivered nothing yet.
	Settled(partition int32) (offset int64, ok bool)
}

// StartResolver is implemented by a source that can tell, before reading
// a partition, the offset its configured start stands for (source/kafka's
// Assigned: the log start, the log end, or the first record at a time).
// A Balancer records that offset as the first checkpoint of a partition
// that has none before starting it, so that an owner that takes the
// partition over resumes there: with Latest or a start time, a new owner
// resolving the start again would skip what arrived in between.
type StartResolver interface {
	StartOffsets(ctx context.Context, partitions []int32) (map[int32]int64, error)
}

// EmitGate is implemented by a source that calls a function before it
// emits each batch of records (source/kafka's Assigned). A Balancer
// gives it a check of the self-fence deadline, so that a process resumed
// after a pause (SIGSTOP, a VM frozen) past its deadline stops its
// partitions before it emits anything more, whether or not the
// deadline's timer has run yet.
type EmitGate interface {
	BeforeEmit(func())
}

// Partitioned is a source of T that a Balancer can drive.
type Partitioned[T any] interface {
	stream.Source[T]
	Assignable
}

// Config configures a Balancer.
type Config struct {
	// ID names this instance among the group's members: required, and
	// unique (two instances with one id would each believe the other's
	// leases theirs). A pod name or host:pid.
	ID string
	// Interval is the time between two renewals, each jittered by up to
	// ±10% (default 10 s). The store's Expiration must be at least three
	// times as long.
	Interval time.Duration
	// Strategy is Balanced (the default: free partitions up to the fair
	// share at once, at most one steal per round) or Greedy.
	Strategy Strategy
	// Fixed, if set, are the partitions this instance reads, whatever the
	// others hold: no balancing (a static layout). It claims each as soon
	// as it is free or its owner's lease has expired.
	Fixed []int32
	// Margin is how long before its leases expire by the store's clock an
	// instance that could not renew them stops their partitions (default
	// Expiration/5): the self-fence deadline is the send time of the last
	// renewal that succeeded + Expiration - Margin, on this process's
	// monotonic clock. It covers the store's clock running faster than
	// this process's. It must be below Expiration - Interval.
	Margin time.Duration
	// Logger receives claims, stops and failures (default slog.Default()).
	Logger *slog.Logger
	// OnChange, if set, is called (under the balancer's lock: keep it
	// short) each time a partition starts or stops here.
	OnChange func(Change)
	// OnCheckpoint, if set, is called with every checkpoint write and its
	// outcome (audit logs, tests).
	OnCheckpoint func(Write, Outcome)
	// Clock is the time the balancer runs on (default: the system clock).
	// Every interval, deadline, timeout and timer of the balancer goes
	// through it; the store's clock stays the store's.
	Clock Clock
}

// Change is a partition started or stopped by a Balancer.
type Change struct {
	Partition int32
	Epoch     int64
	// Started is true when the partition starts (from Offset, -1 for the
	// source's configured start), false when it stops for Reason.
	Started bool
	Offset  int64
	Reason  StopReason
}

// StopReason says why a partition stopped.
type StopReason string

const (
	// StopRenewalRefused: the store refused the lease's renewal (another
	// owner claimed it, a rewind raised its epoch, or it expired).
	StopRenewalRefused StopReason = "renewal_refused"
	// StopCheckpointRefused: the store refused a checkpoint of it.
	StopCheckpointRefused StopReason = "checkpoint_refused"
	// StopSelfFenced: no renewal succeeded before the self-fence deadline.
	StopSelfFenced StopReason = "self_fenced"
	// StopClosed: the balancer closed (and relinquished it).
	StopClosed StopReason = "closed"
)

var stopReasons = []StopReason{StopRenewalRefused, StopCheckpointRefused, StopSelfFenced, StopClosed}

// ErrConfig is wrapped by every configuration error of a Balancer.
var ErrConfig = errors.New("sluice: ownership: invalid configuration")

// expiring is implemented by a store that knows its lease length.
type expiring interface{ Expiration() time.Duration }

// Balancer shares a stream's partitions with the other instances of a
// group through a Store, and drives a Partitioned source accordingly. Add
// it to a pipeline with stream.From; give it to sink/checkpoint as the
// committer (it writes each owned partition's settled offset to the
// store, fenced by the lease's epoch); Close it after the pipeline's Run
// returns (a final checkpoint, then its partitions are relinquished so
// another instance takes them within one interval).
//
// Its renewal loop runs on a goroutine of its own from Run until Close:
// each round renews the leases held and records this member's presence
// (one store call), stops the partitions whose renewal was refused,
// claims what Plan (or Fixed) says from that fresh table (a second call,
// only when there is something to claim), reads the checkpoints of the
// partitions won and starts them there. A partition of which this
// instance is still the recorded owner under another epoch (a rewind) is
// claimed again at once and restarts from its new checkpoint.
//
// A refused checkpoint stops its partition at once. If no renewal
// succeeds before the self-fence deadline (see Config.Margin), every
// partition stops before its lease can expire by the store's clock: the
// store unreachable or this process paused makes the instance stop
// processing, not two instances process at once. Records emitted before a
// stop may still be in the pipeline; their side effects happen and their
// settles are ignored (the next owner processes them again): sinks must
// be idempotent.
type Balancer[T any] struct {
	store Store
	src   Partitioned[T]
	cfg   Config
	exp   time.Duration
	log   *slog.Logger
	clock Clock
	rnd   *rand.Rand // the loop's only

	claiming atomic.Bool
	closeMu  sync.Mutex // one Close at a time

	mu        sync.Mutex
	parts     []int32
	held      map[int32]*held
	deadline  time.Time                 // self-fence deadline (monotonic and wall readings); zero while nothing is held
	fence     Timer                     // fires at deadline
	due       atomic.Pointer[time.Time] // deadline, read by gate without mu; nil when zero
	table     Table
	reread    bool            // the next renewal reads the whole table (see renew)
	unread    int             // renewals since the whole table was last read
	readParts []int32         // the partitions of the last whole read
	lastOK    time.Time       // send time of the last renewal that succeeded
	streak    time.Time       // send time of the first of the renewals since none failed for an expiration
	known     map[int32]int64 // the latest checkpoint seen or written per partition
	runs      bool
	closed    bool
	orphan    Timer        // relinquishes if Close does not follow Run
	commits   atomic.Int64 // Commit calls, to tell a pipeline draining from one gone
	cancel    context.CancelFunc
	loopDone  chan struct{}
	kick      chan struct{}
	listing   sync.WaitGroup // the partition list's refresh in flight
	busy      atomic.Bool    // a refresh is in flight

	stats counters
}

type held struct {
	Lease
	started bool
	// wait: the partition was taken from an owner that may still
	// process it; it starts once a table shows that owner stopped it, or
	// that its lease would have expired (Ownership.Pending).
	wait    bool
	written int64 // the checkpoint recorded under this lease
}

// NewBalancer returns a balancer of src's partitions over store, or an
// error naming what is wrong with cfg. The store's expiration (a store
// with an Expiration method, as redisstore's) must be at least 3 x
// cfg.Interval.
func NewBalancer[T any](store Store, src Partitioned[T], cfg Config) (*Balancer[T], error) {
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	clock := cfg.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	var exp time.Duration
	if e, ok := store.(expiring); ok {
		exp = e.Expiration()
	}
	if cfg.Margin == 0 {
		cfg.Margin = exp / 5
	}
	var errs []error
	bad := func(arg, format string, a ...any) {
		errs = append(errs, &stream.ConfigError{Stage: "ownership balancer", Argument: arg, Reason: fmt.Sprintf(format, a...)})
	}
	switch {
	case store == nil:
		bad("store", "a store is required")
	case exp == 0:
		bad("store", "the store does not say how long its leases last (no Expiration method)")
	case exp < 3*cfg.Interval:
		bad("Interval", "%v: the store's expiration %v must be at least 3 x the interval, so that a lease survives a failed renewal", cfg.Interval, exp)
	}
	if src == nil {
		bad("src", "a source is required")
	}
	if cfg.ID == "" {
		bad("ID", "an instance id is required")
	}
	if cfg.Interval < 0 {
		bad("Interval", "must be positive, got %v", cfg.Interval)
	}
	if cfg.Strategy != Balanced && cfg.Strategy != Greedy {
		bad("Strategy", "unknown strategy %d", cfg.Strategy)
	}
	// Two renewals may be 1.1 intervals apart (the jitter) plus a round's
	// other calls, each bounded by the interval: the deadline must leave
	// room for both.
	if room := exp - 2*cfg.Interval - cfg.Interval/10; exp > 0 && (cfg.Margin < 0 || cfg.Margin >= room) {
		bad("Margin", "%v: must be at least 0 and below the expiration minus 2.1 x the interval (%v), or the instance fences itself between renewals",
			cfg.Margin, room)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	h := fnv.New64a()
	h.Write([]byte(cfg.ID))
	b := &Balancer[T]{store: store, src: src, cfg: cfg, exp: exp, clock: clock,
		log:  cfg.Logger.With("component", "ownership", "member", cfg.ID),
		rnd:  rand.New(rand.NewPCG(h.Sum64(), uint64(clock.Now().UnixNano()))),
		held: map[int32]*held{}, known: map[int32]int64{}, kick: make(chan struct{}, 1)}
	if g, ok := src.(EmitGate); ok {
		g.BeforeEmit(b.gate)
	}
	return b, nil
}

// Name returns the source's name, or "owned".
func (b *Balancer[T]) Name() string {
	if n, ok := b.src.(stream.Named); ok {
		return n.Name()
	}
	return "owned"
}

// Run starts the renewal loop, then runs the source until ctx is
// cancelled or it fails. When it returns, the balancer claims nothing more
// but keeps renewing what it holds, so that the pipeline's final
// checkpoint is accepted: Close must follow (even when Run failed). If it
// does not, and no Commit came for a whole expiration (the pipeline is
// not draining any more), the balancer closes itself (a checkpoint of
// what is settled, then its partitions are relinquished), so that a
// forgotten Close does not leave them owned and unread. A balancer runs
// once.
func (b *Balancer[T]) Run(ctx context.Context, out *stream.Outlet[T]) error {
	parts, err := b.src.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("sluice: ownership: listing partitions: %w", err)
	}
	for _, p := range b.cfg.Fixed {
		if !slices.Contains(parts, p) {
			return fmt.Errorf("%w: %w", ErrConfig, &stream.ConfigError{Stage: "ownership balancer", Argument: "Fixed",
				Reason: fmt.Sprintf("partition %d is not among the stream's partitions %v", p, parts)})
		}
	}
	b.mu.Lock()
	if b.runs {
		b.mu.Unlock()
		// The source still holds the first run's partition states (and
		// their unsettled records, which nobody will settle).
		return errors.New("sluice: ownership: Run called twice: create a new source and balancer for another run")
	}
	b.runs = true
	b.parts = parts
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel, b.loopDone = cancel, make(chan struct{})
	b.claiming.Store(true)
	b.clock.Go(func() { b.loop(lctx) })
	b.mu.Unlock()
	defer func() {
		b.claiming.Store(false)
		b.mu.Lock()
		if !b.closed {
			seen := b.commits.Load()
			b.orphan = b.clock.AfterFunc(b.exp, func() { b.abandon(seen) })
		}
		b.mu.Unlock()
	}()
	return b.src.Run(ctx, out)
}

// abandon closes a balancer whose Run returned long ago without a Close,
// unless the pipeline committed since seen (it is still draining).
func (b *Balancer[T]) abandon(seen int64) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if now := b.commits.Load(); now != seen {
		b.orphan = b.clock.AfterFunc(b.exp, func() { b.abandon(now) })
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.log.Warn("Close was not called after Run returned, and nothing was committed for the expiration; closing: a final checkpoint, then the partitions are relinquished",
		"expiration", b.exp)
	ctx, cancel := b.clock.WithTimeout(context.Background(), b.cfg.Interval)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		b.log.Warn("closing failed; the leases expire by themselves", "err", err)
	}
}

// Close ends the renewal loop, writes a final checkpoint of every
// partition held, stops them and relinquishes their leases (so another
// instance claims them at its next round instead of after the
// expiration), and removes this member's presence. Call it after the
// pipeline's Run has returned. A ctx already done (often the one that
// stopped the pipeline) is replaced by one of an interval, so that the
// final checkpoint and the relinquish are still sent.
func (b *Balancer[T]) Close(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = b.clock.WithTimeout(context.WithoutCancel(ctx), b.cfg.Interval)
		defer cancel()
	}
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	b.claiming.Store(false)
	b.mu.Lock()
	cancel, done := b.cancel, b.loopDone
	b.closed = true
	if b.orphan != nil {
		b.orphan.Stop()
	}
	b.mu.Unlock()
	if cancel != nil {
		cancel()
		b.clock.Wait(context.Background(), -1, done)
	}
	err := b.Commit(ctx)
	b.mu.Lock()
	leases := b.leases()
	for _, l := range leases {
		b.stop(l.Partition, StopClosed)
	}
	if b.fence != nil {
		b.fence.Stop()
	}
	b.deadline = time.Time{}
	b.due.Store(nil)
	b.mu.Unlock()
	if len(leases) > 0 {
		if e := b.store.Relinquish(ctx, b.cfg.ID, leases); e != nil {
			err = errors.Join(err, fmt.Errorf("sluice: ownership: relinquish: %w", e))
		} else {
			b.log.Info("partitions relinquished", "partitions", len(leases))
		}
	}
	if e := b.store.Leave(ctx, b.cfg.ID); e != nil {
		err = errors.Join(err, fmt.Errorf("sluice: ownership: leave: %w", e))
	}
	return err
}

// Owned returns the leases this instance holds now, by partition.
func (b *Balancer[T]) Owned() []Lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leases()
}

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
	rnd   *rand.Rand // the loop's only

	claiming atomic.Bool
	closeMu  sync.Mutex // one Close at a time

	mu       sync.Mutex
	parts    []int32
	held     map[int32]*held
	deadline time.Time                 // self-fence deadline (monotonic and wall readings); zero while nothing is held
	fence    *time.Timer               // fires at deadline
	due      atomic.Pointer[time.Time] // deadline, read by gate without mu; nil when zero
	table    Table
	lastOK   time.Time       // send time of the last renewal that succeeded
	streak   time.Time       // send time of the first of the renewals since none failed for an expiration
	known    map[int32]int64 // the latest checkpoint seen or written per partition
	runs     bool
	closed   bool
	orphan   *time.Timer  // relinquishes if Close does not follow Run
	commits  atomic.Int64 // Commit calls, to tell a pipeline draining from one gone
	cancel   context.CancelFunc
	loopDone chan struct{}
	kick     chan struct{}
	listing  sync.WaitGroup // the partition list's refresh in flight
	busy     atomic.Bool    // a refresh is in flight

	stats counters
}

type held struct {
	Lease
	started bool
	written int64 // the checkpoint recorded under this lease
}

type counters struct {
	rounds, renewFailures, claimed, stolen, reclaimed                        atomic.Int64
	writes, writeErrors, fencedWrites, behindWrites, checkpointsLost, fences atomic.Int64
	stops                                                                    [4]atomic.Int64
	lastRenew                                                                atomic.Int64 // ns
	lastCheckpoint                                                           atomic.Int64 // unix ns of the last accepted write
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
	b := &Balancer[T]{store: store, src: src, cfg: cfg, exp: exp,
		log:  cfg.Logger.With("component", "ownership", "member", cfg.ID),
		rnd:  rand.New(rand.NewPCG(h.Sum64(), uint64(time.Now().UnixNano()))),
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
	go b.loop(lctx)
	b.mu.Unlock()
	defer func() {
		b.claiming.Store(false)
		b.mu.Lock()
		if !b.closed {
			seen := b.commits.Load()
			b.orphan = time.AfterFunc(b.exp, func() { b.abandon(seen) })
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
		b.orphan = time.AfterFunc(b.exp, func() { b.abandon(now) })
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.log.Warn("Close was not called after Run returned, and nothing was committed for the expiration; closing: a final checkpoint, then the partitions are relinquished",
		"expiration", b.exp)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Interval)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		b.log.Warn("closing failed; the leases expire by themselves", "err", err)
	}
}

func (b *Balancer[T]) loop(ctx context.Context) {
	defer close(b.loopDone)
	defer b.listing.Wait()
	for {
		b.round(ctx)
		b.refresh(ctx)
		d := time.Duration(float64(b.cfg.Interval) * (0.9 + 0.2*b.rnd.Float64()))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-b.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// refresh lists the stream's partitions again, in the background (a
// broker that does not answer must not hold renewals up), so that
// partitions added to the stream are claimed too.
func (b *Balancer[T]) refresh(ctx context.Context) {
	if !b.claiming.Load() || !b.busy.CompareAndSwap(false, true) {
		return
	}
	b.listing.Add(1)
	go func() {
		defer b.listing.Done()
		defer b.busy.Store(false)
		lctx, cancel := context.WithTimeout(ctx, b.cfg.Interval)
		ps, err := b.src.Partitions(lctx)
		cancel()
		if err != nil {
			b.log.Debug("listing the partitions failed; keeping the last list", "err", err)
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.cfg.Fixed == nil && len(ps) > len(b.parts) {
			b.log.Info("the stream has new partitions", "partitions", len(ps), "were", len(b.parts))
		}
		b.parts = ps
	}()
}

// round renews, stops what was refused, claims and starts. Its store
// calls share one interval, so that the next renewal is sent at most 2.1
// intervals after this one (see Config.Margin).
func (b *Balancer[T]) round(ctx context.Context) {
	b.stats.rounds.Add(1)
	b.mu.Lock()
	leases := b.leases()
	parts := b.parts
	b.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Interval)
	defer cancel()
	table, outs, err := b.store.Renew(ctx, b.cfg.ID, parts, leases)
	b.stats.lastRenew.Store(int64(time.Since(sent)))
	if err != nil {
		b.stats.renewFailures.Add(1)
		if !errors.Is(ctx.Err(), context.Canceled) {
			b.log.Warn("renewal failed; partitions stop at the self-fence deadline unless one succeeds before", "err", err,
				"deadline_in", b.untilDeadline())
		}
		return
	}
	b.mu.Lock()
	for i, l := range leases {
		if h := b.held[l.Partition]; h != nil && h.Epoch == l.Epoch && outs[i] != Accepted {
			b.stop(l.Partition, StopRenewalRefused)
		}
	}
	b.table = table
	if b.lastOK.IsZero() || sent.Sub(b.lastOK) > b.exp || table.Fresh {
		b.streak = sent // a start, a comeback, or a store that lost its data
	}
	b.lastOK = sent
	// Every live member renews (records its presence) at least every 1.1
	// intervals: a table read that long after this member's renewals
	// resumed shows them all.
	stable := sent.Sub(b.streak) > b.cfg.Interval*11/10
	if len(b.held) > 0 {
		b.arm(sent)
	}
	b.mu.Unlock()
	if b.claiming.Load() {
		b.claim(ctx, sent, table, stable)
	}
	b.startWon(ctx)
}

// claim claims what this member lacks, from table. Unless stable, it
// claims at most one partition by Plan: a member that starts, or comes
// back after an outage longer than the expiration, may read a table in
// which the presence of the others, back too, is not recorded yet (or
// has lapsed), and would take every partition, for them to steal back
// one per round. So for 1.1 intervals after its renewals start (or
// resume), it claims one partition per round.
func (b *Balancer[T]) claim(ctx context.Context, sent time.Time, table Table, stable bool) {
	b.mu.Lock()
	var claims []Claim
	kinds := map[int32]*atomic.Int64{}
	for _, o := range table.Owners {
		if b.held[o.Partition] == nil && o.Owner == b.cfg.ID && !o.Expired(b.exp) {
			claims = append(claims, Claim{Partition: o.Partition, Version: o.Version}) // ours under another epoch: a rewind
			kinds[o.Partition] = &b.stats.reclaimed
		}
	}
	if b.cfg.Fixed != nil {
		for _, o := range table.Owners {
			if slices.Contains(b.cfg.Fixed, o.Partition) && b.held[o.Partition] == nil && kinds[o.Partition] == nil && o.Expired(b.exp) {
				claims = append(claims, Claim{Partition: o.Partition, Version: o.Version})
				kinds[o.Partition] = &b.stats.claimed
			}
		}
	} else {
		// Members starting at once may each see only themselves in
		// their first table and claim every free partition: the version
		// check gives each partition to one of them, and the steals of
		// the next rounds even the shares out.
		plan := Plan(table, b.cfg.ID, b.exp, b.cfg.Strategy, b.rnd)
		if !stable && len(plan) > 1 {
			plan = plan[b.rnd.IntN(len(plan)):][:1]
		}
		for _, c := range plan {
			if kinds[c.Partition] != nil {
				continue
			}
			claims = append(claims, c)
			kinds[c.Partition] = &b.stats.claimed
			for _, o := range table.Owners {
				if o.Partition == c.Partition && !o.Expired(b.exp) && o.Owner != b.cfg.ID {
					kinds[c.Partition] = &b.stats.stolen
				}
			}
		}
	}
	b.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	won, err := b.store.Claim(ctx, b.cfg.ID, claims)
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			b.log.Warn("claim failed", "err", err)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range won {
		kinds[l.Partition].Add(1)
		b.held[l.Partition] = &held{Lease: l, written: -1}
		b.log.Info("partition claimed", "partition", l.Partition, "epoch", l.Epoch)
	}
	if len(won) > 0 {
		b.arm(sent) // a claim is a renewal made after sent
	}
}

// startWon reads the checkpoints of the leases won and not started yet
// and starts their partitions there. A partition without a checkpoint
// gets one first, if the source can resolve its configured start
// (StartResolver): the offset is written under the lease, and the
// partition starts only once that write is accepted.
func (b *Balancer[T]) startWon(ctx context.Context) {
	b.mu.Lock()
	var ps []int32
	for p, h := range b.held {
		if !h.started {
			ps = append(ps, p)
		}
	}
	b.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	slices.Sort(ps)
	cks, err := b.store.Checkpoints(ctx, ps)
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			b.log.Warn("reading checkpoints failed; the partitions won start at the next round", "err", err)
		}
		return
	}
	var missing []int32
	b.mu.Lock()
	for _, ck := range cks {
		if last, ok := b.known[ck.Partition]; ok && ck.Offset < 0 && b.held[ck.Partition] != nil {
			b.stats.checkpointsLost.Add(1)
			b.log.Error("CHECKPOINT LOST: the store has no checkpoint for a partition that had one (the store lost its data: a restart without persistence, a failover); resuming from the last checkpoint this instance knew",
				"partition", ck.Partition, "last_known_offset", last)
		}
		if ck.Offset < 0 {
			missing = append(missing, ck.Partition)
		}
	}
	known := 0
	for _, p := range missing {
		if _, ok := b.known[p]; ok {
			known++
		}
	}
	b.mu.Unlock()
	r, resolves := b.src.(StartResolver)
	if len(missing) > 0 && (resolves || known > 0) {
		first := b.writeStarts(ctx, r, missing)
		for i, ck := range cks {
			if ck.Offset < 0 {
				cks[i].Offset = -2 // not started this round
				if off, ok := first[ck.Partition]; ok {
					cks[i].Offset = off
				}
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ck := range cks {
		h := b.held[ck.Partition]
		if h == nil || h.started || ck.Offset < -1 {
			continue // stopped (or fenced) meanwhile, or its start not recorded yet
		}
		if ck.Offset >= 0 {
			b.known[ck.Partition] = ck.Offset // the store's, a rewind's included
		}
		h.started, h.written = true, ck.Offset
		b.src.Start(ck.Partition, ck.Offset)
		b.log.Info("partition started", "partition", ck.Partition, "epoch", h.Epoch, "offset", ck.Offset)
		if b.cfg.OnChange != nil {
			b.cfg.OnChange(Change{Partition: ck.Partition, Epoch: h.Epoch, Started: true, Offset: ck.Offset})
		}
	}
}

// writeStarts records the first checkpoint of partitions without one,
// under the leases held: the last checkpoint this instance knew of (the
// store lost it), else the configured start resolved by r (nil: none).
// It returns the offsets recorded.
func (b *Balancer[T]) writeStarts(ctx context.Context, r StartResolver, ps []int32) map[int32]int64 {
	offs := map[int32]int64{}
	var resolve []int32
	b.mu.Lock()
	for _, p := range ps {
		if off, ok := b.known[p]; ok {
			offs[p] = off
		} else {
			resolve = append(resolve, p)
		}
	}
	b.mu.Unlock()
	if len(resolve) > 0 && r != nil {
		got, err := r.StartOffsets(ctx, resolve)
		if err != nil {
			b.log.Warn("resolving the start of partitions without a checkpoint failed; those not resolved start at the next round", "partitions", resolve, "err", err)
		}
		for p, off := range got {
			offs[p] = off
		}
	}
	b.mu.Lock()
	var writes []Write
	for _, p := range ps {
		h, off := b.held[p], offs[p]
		if _, ok := offs[p]; ok && h != nil && !h.started && off >= 0 {
			writes = append(writes, Write{Lease: h.Lease, Offset: off, Sequence: -1})
		}
	}
	b.mu.Unlock()
	outs, err := b.write(ctx, writes)
	if err != nil {
		b.log.Warn("recording the start of partitions without a checkpoint failed; they start at the next round", "err", err)
		return nil
	}
	first := map[int32]int64{}
	for i, w := range writes {
		if outs[i] == Accepted {
			first[w.Partition] = w.Offset
		}
	}
	return first
}

// arm sets the self-fence deadline from a renewal sent at sent. Called
// with mu held.
func (b *Balancer[T]) arm(sent time.Time) {
	b.deadline = sent.Add(b.exp - b.cfg.Margin)
	d0 := b.deadline
	b.due.Store(&d0)
	d := time.Until(b.deadline)
	if b.fence == nil {
		b.fence = time.AfterFunc(d, b.selfFence)
	} else {
		b.fence.Reset(d)
	}
}

func (b *Balancer[T]) untilDeadline() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.deadline.IsZero() {
		return 0
	}
	return time.Until(b.deadline)
}

// gate stops every partition if the self-fence deadline has passed; the
// source calls it before emitting each batch of records (EmitGate).
// It runs for every batch: the deadline is read without the lock, which
// is taken only once it has passed.
func (b *Balancer[T]) gate() {
	d := b.due.Load()
	if d == nil {
		return
	}
	if now := time.Now(); now.Before(*d) && now.Round(0).Before(d.Round(0)) {
		return
	}
	b.selfFence()
}

// selfFence stops every partition if the deadline has passed, on the
// monotonic clock or on the wall clock (the monotonic clock stands still
// while the machine is suspended; Redis's does not).
func (b *Balancer[T]) selfFence() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.deadline.IsZero() || len(b.held) == 0 ||
		(now.Before(b.deadline) && now.Round(0).Before(b.deadline.Round(0))) {
		return
	}
	b.stats.fences.Add(1)
	b.log.Error("SELF-FENCED: no renewal succeeded in time; every partition stops before its lease can expire in the store",
		"partitions", len(b.held), "expiration", b.exp, "margin", b.cfg.Margin)
	for p := range b.held {
		b.stop(p, StopSelfFenced)
	}
	b.deadline = time.Time{}
	b.due.Store(nil)
}

// stop stops partition p here. Called with mu held.
func (b *Balancer[T]) stop(p int32, why StopReason) {
	h := b.held[p]
	if h == nil {
		return
	}
	delete(b.held, p)
	if h.started {
		b.src.Stop(p)
	}
	b.stats.stops[slices.Index(stopReasons, why)].Add(1)
	if why != StopClosed {
		b.log.Warn("partition stopped", "partition", p, "epoch", h.Epoch, "reason", string(why))
		select { // claim again (a rewind) without waiting a whole interval
		case b.kick <- struct{}{}:
		default:
		}
	}
	if b.cfg.OnChange != nil {
		b.cfg.OnChange(Change{Partition: p, Epoch: h.Epoch, Reason: why})
	}
}

// leases returns the leases held, by partition. Called with mu held.
func (b *Balancer[T]) leases() []Lease {
	ls := make([]Lease, 0, len(b.held))
	for _, h := range b.held {
		ls = append(ls, h.Lease)
	}
	slices.SortFunc(ls, func(a, c Lease) int { return int(a.Partition - c.Partition) })
	return ls
}

// Commit writes, for every partition read under a lease, the offset
// below which its records are settled, if it advanced, in one store call;
// each write is fenced by its lease. A refused write stops its partition
// at once. It implements stream.Committer.
func (b *Balancer[T]) Commit(ctx context.Context) error {
	b.commits.Add(1)
	b.mu.Lock()
	var writes []Write
	for p, h := range b.held {
		if !h.started {
			continue
		}
		if off, ok := b.src.Settled(p); ok && off > h.written {
			writes = append(writes, Write{Lease: h.Lease, Offset: off, Sequence: -1})
		}
	}
	b.mu.Unlock()
	_, err := b.write(ctx, writes)
	return err
}

// write records checkpoints in one store call and applies the outcomes:
// an accepted write is remembered, a fenced one stops its partition.
func (b *Balancer[T]) write(ctx context.Context, writes []Write) ([]Outcome, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	slices.SortFunc(writes, func(a, c Write) int { return int(a.Partition - c.Partition) })
	outs, err := b.store.Checkpoint(ctx, b.cfg.ID, writes)
	if err != nil {
		b.stats.writeErrors.Add(1)
		return nil, fmt.Errorf("sluice: ownership: checkpoint: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range writes {
		if b.cfg.OnCheckpoint != nil {
			b.cfg.OnCheckpoint(w, outs[i])
		}
		h := b.held[w.Partition]
		same := h != nil && h.Epoch == w.Epoch
		switch outs[i] {
		case Accepted:
			b.stats.writes.Add(1)
			b.stats.lastCheckpoint.Store(time.Now().UnixNano())
			b.known[w.Partition] = max(b.known[w.Partition], w.Offset)
			if same && w.Offset > h.written {
				h.written = w.Offset
			}
		case Fenced:
			b.stats.fencedWrites.Add(1)
			if same {
				b.stop(w.Partition, StopCheckpointRefused)
			}
		case Behind:
			b.stats.behindWrites.Add(1)
			b.log.Warn("checkpoint behind the recorded one, refused", "partition", w.Partition, "offset", w.Offset)
		}
	}
	return outs, nil
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
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Interval)
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
		<-done
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

// Stats is a snapshot of a balancer.
type Stats struct {
	// Owned are the leases held now; Members the members present in the
	// last table read.
	Owned   []Lease
	Members int
	// Rounds counts renewal rounds, RenewFailures those whose renewal
	// failed; LastRenewal is the latest renewal's latency.
	Rounds, RenewFailures int64
	LastRenewal           time.Duration
	// Claimed counts partitions won without a live owner, Stolen from a
	// live owner above its share, Reclaimed after a rewind.
	Claimed, Stolen, Reclaimed int64
	// Stops counts partitions stopped, by reason.
	Stops map[StopReason]int64
	// Checkpoints counts checkpoint writes accepted, FencedCheckpoints and
	// BehindCheckpoints those refused, CheckpointErrors the store calls
	// that failed; CheckpointsLost the partitions found without the
	// checkpoint they had; SelfFences the self-fence events.
	Checkpoints, FencedCheckpoints, BehindCheckpoints, CheckpointErrors, CheckpointsLost, SelfFences int64
	// SinceCheckpoint is the time since a checkpoint write was last
	// accepted (-1: never).
	SinceCheckpoint time.Duration
}

// Stats returns a snapshot of the balancer's counters.
func (b *Balancer[T]) Stats() Stats {
	c := &b.stats
	st := Stats{Rounds: c.rounds.Load(), RenewFailures: c.renewFailures.Load(), LastRenewal: time.Duration(c.lastRenew.Load()),
		Claimed: c.claimed.Load(), Stolen: c.stolen.Load(), Reclaimed: c.reclaimed.Load(), Stops: map[StopReason]int64{},
		Checkpoints: c.writes.Load(), FencedCheckpoints: c.fencedWrites.Load(), BehindCheckpoints: c.behindWrites.Load(),
		CheckpointErrors: c.writeErrors.Load(), CheckpointsLost: c.checkpointsLost.Load(), SelfFences: c.fences.Load(),
		SinceCheckpoint: -1}
	for i, r := range stopReasons {
		st.Stops[r] = c.stops[i].Load()
	}
	if at := c.lastCheckpoint.Load(); at != 0 {
		st.SinceCheckpoint = time.Since(time.Unix(0, at))
	}
	b.mu.Lock()
	st.Owned = b.leases()
	st.Members = len(b.table.Members)
	b.mu.Unlock()
	return st
}

// Instrument publishes the balancer's metrics (docs/metrics.md,
// "Ownership"), and the source's if it publishes any.
func (b *Balancer[T]) Instrument(stage string, m stream.Meter) {
	if in, ok := b.src.(stream.Instrumented); ok {
		m.Include(in, stage)
	}
	l := stream.Label{Name: "stage", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		st := b.Stats()
		w.Gauge("sluice_ownership_owned_partitions", "Partitions this instance holds a lease on.", float64(len(st.Owned)), l)
		w.Gauge("sluice_ownership_members", "Members present in the group (last table read).", float64(st.Members), l)
		const cl, clHelp = "sluice_ownership_claims_total", "Partitions won, by kind (free: no live owner; steal: from a member above its share; reclaim: after a rewind)."
		w.Counter(cl, clHelp, float64(st.Claimed), l, stream.Label{Name: "kind", Value: "free"})
		w.Counter(cl, clHelp, float64(st.Stolen), l, stream.Label{Name: "kind", Value: "steal"})
		w.Counter(cl, clHelp, float64(st.Reclaimed), l, stream.Label{Name: "kind", Value: "reclaim"})
		for _, r := range stopReasons {
			w.Counter("sluice_ownership_stops_total", "Partitions stopped here, by reason.", float64(st.Stops[r]), l, stream.Label{Name: "reason", Value: string(r)})
		}
		w.Counter("sluice_ownership_renewals_total", "Renewal rounds.", float64(st.Rounds), l)
		w.Counter("sluice_ownership_renewal_failures_total", "Renewal rounds whose store call failed.", float64(st.RenewFailures), l)
		w.Gauge("sluice_ownership_renewal_seconds", "Latency of the latest renewal.", st.LastRenewal.Seconds(), l)
		const ck, ckHelp = "sluice_ownership_checkpoints_total", "Checkpoint writes, by outcome (accepted, fenced, behind, error)."
		w.Counter(ck, ckHelp, float64(st.Checkpoints), l, stream.Label{Name: "outcome", Value: "accepted"})
		w.Counter(ck, ckHelp, float64(st.FencedCheckpoints), l, stream.Label{Name: "outcome", Value: "fenced"})
		w.Counter(ck, ckHelp, float64(st.BehindCheckpoints), l, stream.Label{Name: "outcome", Value: "behind"})
		w.Counter(ck, ckHelp, float64(st.CheckpointErrors), l, stream.Label{Name: "outcome", Value: "error"})
		if st.SinceCheckpoint >= 0 {
			w.Gauge("sluice_ownership_checkpoint_age_seconds", "Time since a checkpoint write was last accepted.", st.SinceCheckpoint.Seconds(), l)
		}
		w.Counter("sluice_ownership_self_fences_total", "Times no renewal succeeded before the self-fence deadline and every partition stopped.", float64(st.SelfFences), l)
		w.Counter("sluice_ownership_checkpoints_lost_total", "Partitions found without the checkpoint they had (the store lost data).", float64(st.CheckpointsLost), l)
	})
}

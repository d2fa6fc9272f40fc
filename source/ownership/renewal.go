package ownership

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

func (b *Balancer[T]) loop(ctx context.Context) {
	defer close(b.loopDone)
	defer b.listing.Wait()
	for {
		b.round(ctx)
		b.refresh(ctx)
		d := time.Duration(float64(b.cfg.Interval) * (0.9 + 0.2*b.rnd.Float64()))
		if b.waiting() {
			// A partition taken waits for its old owner to stop it:
			// look again soon, so that it does not stay unread for a
			// whole interval after.
			d /= 4
		}
		b.clock.Wait(ctx, d, b.kick)
		if ctx.Err() != nil {
			return
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
	// A plain goroutine, not the clock's: it never waits on the clock,
	// and the loop waits for it when it ends.
	go func() {
		defer b.listing.Done()
		defer b.busy.Store(false)
		lctx, cancel := b.clock.WithTimeout(ctx, b.cfg.Interval)
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
	sent := b.clock.Now()
	ctx, cancel := b.clock.WithTimeout(ctx, b.cfg.Interval)
	defer cancel()
	table, outs, err := b.renew(ctx, parts, leases)
	b.stats.lastRenew.Store(int64(b.clock.Now().Sub(sent)))
	if err != nil {
		b.stats.renewFailures.Add(1)
		b.mu.Lock()
		b.reread = true
		b.mu.Unlock()
		if !errors.Is(ctx.Err(), context.Canceled) {
			b.log.Warn("renewal failed; partitions stop at the self-fence deadline unless one succeeds before", "err", err,
				"deadline_in", b.untilDeadline())
		}
		return
	}
	b.mu.Lock()
	var refused []Lease
	for i, l := range leases {
		if h := b.held[l.Partition]; h != nil && h.Epoch == l.Epoch && outs[i] != Accepted {
			b.stop(l.Partition, StopRenewalRefused)
			refused = append(refused, l)
		}
	}
	if table.Unchanged {
		b.stats.unread.Add(1)
	}
	b.release(table)
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
	b.acknowledge(ctx, refused)
	if b.claiming.Load() {
		b.claim(ctx, sent, table, stable)
	}
	b.startWon(ctx)
}

// readEvery bounds how many rounds a member over a Tracker goes without
// reading the whole table, whatever its stamp says: a bound on the cost
// of any change the stamp would miss.
const readEvery = 30

// renew renews the leases and reads the table. Over a Tracker, the table
// is read again only if its stamp changed since the last read,
// or this member has a reason to doubt what it read: a lease refused or
// stopped, a claim tried (whatever it won, the versions it saw moved), a
// renewal failed, the partitions listed changed, a partition held waiting
// for its old owner, or readEvery rounds passed. Otherwise the last table read stands, with the store's time:
// nothing a plan reads changed in it but renewal times and versions.
func (b *Balancer[T]) renew(ctx context.Context, parts []int32, leases []Lease) (Table, []Outcome, error) {
	tr, ok := b.store.(Tracker)
	if !ok {
		return b.store.Renew(ctx, b.cfg.ID, parts, leases)
	}
	b.mu.Lock()
	since, last := b.table.Stamp, b.table
	if b.reread || b.unread >= readEvery || !slices.Equal(parts, b.readParts) {
		since = 0
	}
	for _, h := range b.held {
		if h.wait { // its old owner's lease lapses by time, which the stamp does not show
			since = 0
		}
	}
	b.mu.Unlock()
	t, outs, err := tr.RenewSince(ctx, b.cfg.ID, parts, leases, since)
	if err != nil {
		return t, outs, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !t.Unchanged {
		b.reread, b.unread, b.readParts = false, 0, parts
		return t, outs, nil
	}
	b.unread++
	last.Now, last.Fresh, last.Unchanged = t.Now, t.Fresh, true
	return last, outs, nil
}

// waiting reports whether a partition held waits for its old owner.
func (b *Balancer[T]) waiting() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.held {
		if h.wait {
			return true
		}
	}
	return false
}

// release lets the partitions taken from another owner start once table
// shows that owner stopped them, or that its lease would have expired.
// Called with mu held.
func (b *Balancer[T]) release(table Table) {
	waiting := false
	for _, h := range b.held {
		waiting = waiting || h.wait
	}
	if !waiting {
		return
	}
	for _, o := range table.Owners {
		h := b.held[o.Partition]
		if h != nil && h.wait && o.Owner == b.cfg.ID && o.Epoch == h.Epoch && (!o.Pending(b.exp) || o.Previous == b.cfg.ID) {
			h.wait = false
		}
	}
}

// acknowledge tells the store that this member stopped the partitions of
// leases it lost (refused at a renewal or a checkpoint), so that the
// member that took them starts them without waiting for the old lease to
// expire. A failed acknowledgement only delays that start.
func (b *Balancer[T]) acknowledge(ctx context.Context, lost []Lease) {
	if len(lost) == 0 {
		return
	}
	if err := b.store.Relinquish(ctx, b.cfg.ID, lost); err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		b.log.Debug("acknowledging stopped partitions failed; their new owner starts them once the old leases expire", "err", err)
	}
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
	wait := map[int32]bool{} // taken from an owner that may still process it
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
			// One of those whose lapsed lease was ours if any (back from
			// an outage: they need not move), else any.
			ours := map[int32]bool{}
			for _, o := range table.Owners {
				if o.Owner == b.cfg.ID {
					ours[o.Partition] = true
				}
			}
			var own []Claim
			for _, c := range plan {
				if ours[c.Partition] {
					own = append(own, c)
				}
			}
			if len(own) > 0 {
				plan = own
			}
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
	if len(claims) > 0 {
		b.reread = true // the versions seen moved, whatever is won
	}
	for _, o := range table.Owners {
		if kinds[o.Partition] != nil && ((!o.Expired(b.exp) && o.Owner != b.cfg.ID) || (o.Pending(b.exp) && o.Previous != b.cfg.ID)) {
			wait[o.Partition] = true
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
		b.held[l.Partition] = &held{Lease: l, wait: wait[l.Partition], written: -1}
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
		if !h.started && !h.wait {
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
		if h == nil || h.started || h.wait || ck.Offset < -1 {
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

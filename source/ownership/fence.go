package ownership

import (
	"slices"
	"time"
)

// arm sets the self-fence deadline from a renewal sent at sent. Called
// with mu held.
func (b *Balancer[T]) arm(sent time.Time) {
	b.deadline = sent.Add(b.exp - b.cfg.Margin)
	d0 := b.deadline
	b.due.Store(&d0)
	d := b.deadline.Sub(b.clock.Now())
	if b.fence == nil {
		b.fence = b.clock.AfterFunc(d, b.selfFence)
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
	return b.deadline.Sub(b.clock.Now())
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
	if now := b.clock.Now(); now.Before(*d) && now.Round(0).Before(d.Round(0)) {
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
	now := b.clock.Now()
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
	b.reread = true // the record may name this member still (a self-fence, a rewind)
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

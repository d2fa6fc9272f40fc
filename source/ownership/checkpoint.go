package ownership

import (
	"context"
	"fmt"
	"slices"
)

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
	var lost []Lease
	defer func() { b.acknowledge(ctx, lost) }()
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
			b.stats.lastCheckpoint.Store(b.clock.Now().UnixNano())
			b.known[w.Partition] = max(b.known[w.Partition], w.Offset)
			if same && w.Offset > h.written {
				h.written = w.Offset
			}
		case Fenced:
			b.stats.fencedWrites.Add(1)
			if same {
				b.stop(w.Partition, StopCheckpointRefused)
				lost = append(lost, w.Lease)
			}
		case Behind:
			b.stats.behindWrites.Add(1)
			b.log.Warn("checkpoint behind the recorded one, refused", "partition", w.Partition, "offset", w.Offset)
		}
	}
	return outs, nil
}

package sensors

import (
	"context"
	"time"

	"github.com/sluice-streams/sluice/source/kafka"
)

// caughtUp reports whether a partition's quiet is idleness, for the
// window's idle close; held is how many of its readings the window holds
// open. It is true when its broker answers, every record the partition held a
// moment ago has been sent down the pipeline (kafka's Unsent, the log's
// end asked of the broker), and every reading sent and not yet settled is
// one the window holds: none is on its way to the window, being written
// or dead-lettered. A reader that fell behind, lost its broker or is held
// by its own unwritten minutes is not idle while the sensors go on
// sending, and closing its open minute early would dead-letter their
// on-time readings as late. The last fetch's Unread is not enough: after
// a Redis stall every partition resumes with a backlog, and a partition
// whose records wait in the source behind the others' for longer than
// IdleClose reads Unread 0 (its fetch brought them all). Nor is Unsent:
// records it counts as sent may wait in the pipes before the window, and
// a window that waited longer than IdleClose to hand on its minutes
// (Redis stalled) finds, when it goes on, every partition quiet for that
// long, whatever waits in its input.
//
// A partition paused for holding MaxUnsettledPerPartition readings is
// idle only when the window holds every reading it has unsettled and
// those keep it paused (pausedIdle). Wall time says nothing about it: on
// a busy machine, or after a Redis stall, its written minutes' settles and
// its readings on their way to the window may take longer than IdleClose,
// and it is the partition's own counts, not the time since its last
// write, that tell what still frees it.
func (w *Worker) caughtUp(_ string, partition int32, held int) bool {
	st := w.src.Stats()
	if st.SinceContact > 2*time.Second {
		return false
	}
	for _, p := range st.Partitions {
		if p.Partition == partition && p.Paused {
			return w.pausedIdle(p, held)
		}
	}
	if n, ok := w.unsent(partition); !ok || n != 0 {
		return false
	}
	// Asked after Unsent: a record sent before the broker's answer was
	// tracked before it was sent, and is unsettled now unless it was
	// settled downstream.
	for _, p := range w.src.Stats().Partitions {
		if p.Partition == partition {
			return p.Unsettled == held
		}
	}
	return false
}

// pausedIdle is caughtUp for a paused partition p of which the window
// holds held readings open. Readings of it on their way to the window,
// being written (Redis slow or down) or dead-lettered are unsettled and
// not held: the window takes them in, or their settles resume the
// partition once it is down to half the limit, so it waits, however long
// that takes. One settled down to half is resuming (the source's answer
// may come between the settle and the resume). Otherwise its open
// minutes hold more readings than half the limit (a misconfiguration,
// logged): nothing else will settle and only the idle close can free it.
func (w *Worker) pausedIdle(p kafka.PartitionStats, held int) bool {
	if p.Unsettled != held || p.Pending <= w.cfg.MaxUnsettledPerPartition/2 {
		return false
	}
	if !w.warnedPause.Swap(true) {
		w.cfg.Logger.Warn("sensors: a partition's open minutes hold more readings than MaxUnsettledPerPartition; "+
			"closing them early, so their later readings are dead-lettered as late: raise MaxUnsettledPerPartition",
			"partition", p.Partition, "max_unsettled", w.cfg.MaxUnsettledPerPartition)
	}
	return true
}

// unsent returns how many records of partition the source has not sent,
// from an answer of the broker at most an eighth of IdleClose (and at
// most a second) old, asked for again when older; false if the broker
// did not answer for the partition (then or at the last ask). Called by
// the window's goroutine only, once a partition is quiet: one request
// answers for every partition.
func (w *Worker) unsent(partition int32) (int64, bool) {
	w.unsentMu.Lock()
	defer w.unsentMu.Unlock()
	if time.Since(w.unsentAt) > min(w.cfg.IdleClose/8, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), min(w.cfg.IdleClose/4, 2*time.Second))
		u, err := w.src.Unsent(ctx)
		cancel()
		if err != nil && time.Since(w.unsentErr) > time.Minute {
			w.unsentErr = time.Now()
			w.cfg.Logger.Warn("sensors: asking the broker where the partitions end failed; their idle minutes stay open", "err", err)
		}
		// A failure is cached too: asked again for each quiet partition,
		// a broker that does not answer would hold the window for a
		// timeout per partition.
		w.unsentBy, w.unsentAt = u, time.Now()
	}
	n, ok := w.unsentBy[partition]
	return n, ok
}

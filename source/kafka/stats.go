package kafka

import (
	"time"
)

// PartitionStats describes one assigned partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	// Committed is the last offset this member committed (-1: none yet).
	Committed int64
	// Unsettled counts records delivered and not yet settled.
	Unsettled int
	// Pending is what pausing at MaxUnsettledPerPartition counts: the
	// unsettled records and those settled after the oldest of them (the
	// ring that holds them until it is settled). A paused partition is
	// fetched again once a settle brings it down to half the limit, so
	// one paused with more pending, of which none is on its way to being
	// settled, stays paused: its oldest records wait for whoever holds
	// them (a window's open minutes).
	Pending int
	// Lag counts the records of the partition the group has not committed
	// yet, as of the last fetch: its high watermark minus Committed or,
	// before this member commits, minus where the assignment started
	// reading (the group's committed offset, or for a group that never
	// committed the Start position: the first record fetched). So a
	// pipeline that reads and never commits shows its whole backlog. 0
	// before the first records, and always for an Assigned source: its
	// owner keeps the checkpoints.
	Lag int64
	// Unread is the high watermark of the last fetch minus the offset
	// after the last record delivered: the records waiting at the broker,
	// as of that fetch (stale while the partition is paused or its reader
	// stalls; 0 before its first records). A reader is behind while it is
	// above 0, whatever it committed.
	Unread int64
	// Paused: the partition holds MaxUnsettledPerPartition unsettled
	// records and is not fetched until they are down to half. (A pause of
	// the whole source, PauseReading, is Stats.ReadingPaused.)
	Paused bool
}

// Stats is a snapshot of the source.
type Stats struct {
	Partitions []PartitionStats
	// Records counts records emitted; Commits and CommitErrors commit
	// calls; LastCommit is the latency of the latest; Pauses counts
	// partitions paused for holding too many unsettled records.
	Records, Commits, CommitErrors, Pauses int64
	LastCommit                             time.Duration
	// Duplicates counts settles of a record already settled; LateSettles
	// settles that arrived after their partition was revoked (ignored).
	Duplicates, LateSettles int64
	// Assigned, Revoked and Lost count rebalance events of each kind (a
	// revocation as it begins: it may wait HandoverWait).
	Assigned, Revoked, Lost int64
	// SinceCommit is the time since a commit last succeeded (or found
	// nothing to commit), SinceContact since a broker last answered.
	SinceCommit, SinceContact time.Duration
	// ReadingPaused: PauseReading holds every topic of the source unfetched
	// (a priority source does, on a lower level while a higher one has work
	// waiting); ReadingPauses counts the times it started.
	ReadingPaused bool
	ReadingPauses int64
}

// Stats returns a snapshot of the source's counters.
func (s *Source) Stats() Stats {
	st := Stats{
		Records: s.records.Load(), Commits: s.commits.Load(), CommitErrors: s.commitErrors.Load(),
		Pauses: s.pauses.Load(), LastCommit: time.Duration(s.lastCommit.Load()), Duplicates: s.duplicates.Load(),
		LateSettles: s.late.Load(),
		Assigned:    s.assignedN.Load(), Revoked: s.revokedN.Load(), Lost: s.lostN.Load(),
		ReadingPaused: s.reading.paused.Load(), ReadingPauses: s.reading.pauses.Load(),
	}
	now := time.Now()
	st.SinceCommit = since(s.health.commitOK.Load(), now)
	st.SinceContact = s.health.quietFor(now)
	s.mu.Lock()
	parts := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	for _, p := range parts {
		p.mu.Lock()
		ps := PartitionStats{Topic: p.topic, Partition: p.partition, Committed: p.committed, Unsettled: p.n - p.doneN, Pending: p.n,
			Paused: p.paused.Load()}
		if p.committed >= 0 {
			ps.Lag = max(0, p.hwm-p.committed)
		} else if p.from >= 0 && s.direct == nil {
			ps.Lag = max(0, p.hwm-p.from)
		}
		if p.nextOff >= 0 {
			ps.Unread = max(0, p.hwm-p.nextOff)
		}
		p.mu.Unlock()
		st.Partitions = append(st.Partitions, ps)
	}
	return st
}

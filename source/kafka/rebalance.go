package kafka

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func (s *Source) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.assignedN.Add(1)
	s.learnTopics(assigned)
	var ended []*partition
	s.mu.Lock()
	for t, ps := range assigned {
		for _, p := range ps {
			k := tpKey{t, p}
			if old := s.parts[k]; old != nil { // not revoked first: that assignment is over all the same
				old.mu.Lock()
				old.revoke()
				old.mu.Unlock()
				ended = append(ended, old)
			}
			s.parts[k] = newPartition(s, t, p, -1) // franz-go looks the start up
		}
	}
	s.mu.Unlock()
	// As forget does: an ended assignment that had paused its partition
	// resumes it (franz-go keeps a partition paused across assignments,
	// and the new one, which holds nothing, would never resume it).
	for _, p := range ended {
		p.flow()
	}
	s.log.Info("partitions assigned", "partitions", assigned)
}

// revoked waits up to HandoverWait for the records of the revoked
// partitions sent downstream to be settled, commits what is settled, then
// forgets them: later settles of their records are ignored (fenced).
//
// The revocation is counted (Stats.Revoked) as it begins, if any of the
// partitions is this member's: the wait may be long.
func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if s.ownsAny(revoked) {
		s.revokedN.Add(1)
	}
	s.handOver(ctx, revoked)
	parts := s.forget(revoked)
	if len(parts) == 0 {
		return
	}
	ctx, cancel := s.revokeCtx(ctx)
	defer cancel()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if err := s.commitParts(ctx, parts, true); err != nil {
		s.log.Warn("commit on revoke failed: their records will be processed again by the new owner", "err", err)
	}
	s.log.Info("partitions revoked", "partitions", revoked)
}

// ownsAny reports whether any of the partitions is assigned to this
// member.
func (s *Source) ownsAny(tps map[string][]int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			if s.parts[tpKey{t, p}] != nil {
				return true
			}
		}
	}
	return false
}

// lost forgets the partitions without committing: another member may own
// them already.
func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if len(lost) == 0 {
		// franz-go calls this with nothing to lose too (a member that
		// owns no partitions leaves or its session ends): not an event.
		return
	}
	s.lostN.Add(1)
	s.forget(lost)
	s.log.Warn("partitions lost: nothing committed for them", "partitions", lost)
}

// forget marks the partitions revoked under their settle lock and resumes
// any that were paused.
func (s *Source) forget(tps map[string][]int32) []*partition {
	var parts []*partition
	s.mu.Lock()
	for t, ps := range tps {
		for _, p := range ps {
			k := tpKey{t, p}
			if st := s.parts[k]; st != nil {
				st.mu.Lock()
				st.revoke()
				st.mu.Unlock()
				parts = append(parts, st)
				delete(s.parts, k)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range parts {
		p.flow()
	}
	return parts
}

// handOver stops sending the records of the partitions and waits, up to
// HandoverWait or until ctx ends, until every record of theirs sent
// downstream is settled. The wait only spares their next owner work: what
// is settled when it ends is what is committed. Once Close has begun (the
// pipeline has ended, nothing more will be settled) it does not wait.
func (s *Source) handOver(ctx context.Context, tps map[string][]int32) {
	if s.cfg.HandoverWait <= 0 {
		return
	}
	select {
	case <-s.closing:
		return
	default:
	}
	var parts []*partition
	s.mu.Lock()
	for t, ps := range tps {
		for _, p := range ps {
			if st := s.parts[tpKey{t, p}]; st != nil {
				st.handing.Store(true)
				parts = append(parts, st)
			}
		}
	}
	s.mu.Unlock()
	deadline := time.NewTimer(s.cfg.HandoverWait)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		parts = slices.DeleteFunc(parts, (*partition).sentSettled)
		if len(parts) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-s.closing:
			return
		case <-tick.C:
		}
	}
}

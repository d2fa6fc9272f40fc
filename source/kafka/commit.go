package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Commit commits, for every partition this member owns, the offset below
// which all delivered records are settled, if it advanced. It implements
// stream.Committer.
//
// A commit is fenced by the group generation: the request carries the
// generation and member id read before the offsets were computed, and the
// coordinator refuses it if the group has moved on since. A partition
// revoked or lost meanwhile is left out. So an offset computed in one
// assignment is never committed in a later one, where the partition may
// belong to another member or start again from an older offset.
//
// While this member itself rejoins its group (between its JoinGroup and
// its SyncGroup), Commit first waits for the rejoin to end, up to
// RejoinWait: a commit sent then would be refused. A commit the
// coordinator refuses all the same because the group has moved to a
// generation this member has not heard of yet (ILLEGAL_GENERATION: another
// member joined or left meanwhile) is made again once this member has
// rejoined (in the next generation, for the partitions it still owns; the
// revoked ones were committed by their revocation). One refused because
// the rebalance is completing (REBALANCE_IN_PROGRESS: the commit carries
// the new generation, whose assignment is not synced yet) is made again
// every RejoinRetry in that generation, or sooner in the next one, as is
// one refused under the consumer protocol for an epoch the coordinator
// has moved past (STALE_MEMBER_EPOCH: brokers before Kafka 4.3 refuse a
// commit whose epoch is not the member's latest, which the member learns
// from its next heartbeat). All within ctx and RejoinWait (2 s): a
// pipeline stopping while its group rebalances still commits what it
// settled, and a commit never holds a drain up for long.
func (s *Source) Commit(ctx context.Context) error {
	s.commitCalled.Store(true)
	var until time.Time
	for {
		if until.IsZero() {
			s.rejoin.wait(ctx, time.Now().Add(RejoinWait))
		}
		_, gen := s.cl.GroupMetadata()
		err := s.commitOwned(ctx)
		completing := errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.StaleMemberEpoch)
		if completing || errors.Is(err, kerr.IllegalGeneration) {
			if until.IsZero() {
				until = time.Now().Add(RejoinWait)
			}
			var retry time.Duration // ILLEGAL_GENERATION: only in the next generation
			if completing {
				retry = RejoinRetry
			}
			if s.awaitRejoin(ctx, gen, until, retry) {
				continue
			}
		}
		s.health.committed(err)
		return err
	}
}

// CommitsScheduled tells the source that its Commit will be called while
// the pipeline runs (sink/checkpoint says so when it starts): it does not
// warn that settled records are never committed (Config.UncommittedWarning),
// however long before the first commit.
func (s *Source) CommitsScheduled() { s.commitCalled.Store(true) }

// RejoinWait bounds how long Commit waits for the member to rejoin its
// group when the coordinator refused a commit for a rebalance in progress.
const RejoinWait = 2 * time.Second

// RejoinRetry is how soon Commit makes again, in the same generation, a
// commit refused while the group's rebalance completes.
const RejoinRetry = 100 * time.Millisecond

// commitOwned commits every partition this member owns now.
func (s *Source) commitOwned(ctx context.Context) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	parts := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	return s.commitParts(ctx, parts, false)
}

// awaitRejoin waits, without holding commitMu (the rebalance's revoke
// callback needs it), until the group generation is no longer gen or, if
// retry > 0, retry has passed, and reports whether that happened before
// ctx ended and before until.
func (s *Source) awaitRejoin(ctx context.Context, gen int32, until time.Time, retry time.Duration) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	began := time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case now := <-t.C:
			if _, g := s.cl.GroupMetadata(); g != gen {
				return true
			}
			if retry > 0 && now.Sub(began) >= retry && !now.After(until) {
				return true
			}
			if now.After(until) {
				return false
			}
		}
	}
}

// commitParts commits the given partitions' settled offsets synchronously.
// Partitions revoked or lost are skipped unless revoking says that this is
// the commit of their own revocation (made before the group rebalances,
// still in the generation that owned them). Called with commitMu held.
func (s *Source) commitParts(ctx context.Context, parts []*partition, revoking bool) error {
	// The generation first: a partition found still owned below was owned
	// when it was read, so the coordinator either accepts the commit in
	// that generation or refuses it.
	member, gen := s.cl.GroupMetadata()
	if gen < 0 {
		return nil // not in the group (yet): nothing of ours to commit
	}
	type pending struct {
		p   *partition
		off int64
	}
	var todo []pending
	byTopic := map[string][]kmsg.OffsetCommitRequestTopicPartition{}
	for _, p := range parts {
		p.mu.Lock()
		off := p.commitOffset()
		if (revoking || !p.revoked) && off > p.committed {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p.partition, off, p.epoch, &member
			byTopic[p.topic] = append(byTopic[p.topic], rp)
			todo = append(todo, pending{p, off})
		}
		p.mu.Unlock()
	}
	if len(todo) == 0 {
		return nil
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = s.cfg.Group, gen, member
	if iid, ok := s.cl.OptValue(kgo.InstanceID).(*string); ok {
		req.InstanceID = iid
	}
	ids := s.topicIDsFor(ctx, byTopic)
	for t, ps := range byTopic {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID, rt.Partitions = t, ids[t], ps
		req.Topics = append(req.Topics, rt)
	}
	began := time.Now()
	resp, err := req.RequestWith(ctx, s.cl)
	s.lastCommit.Store(int64(time.Since(began)))
	if err == nil {
		err = commitErrors(req, resp)
	}
	if err != nil {
		s.commitErrors.Add(1)
		return fmt.Errorf("sluice: kafka source: commit (generation %d): %w", gen, err)
	}
	s.commits.Add(1)
	for _, t := range todo {
		t.p.mu.Lock()
		if t.off > t.p.committed {
			t.p.committed = t.off
		}
		t.p.mu.Unlock()
		if s.cfg.OnCommit != nil {
			s.cfg.OnCommit(t.p.topic, t.p.partition, t.off)
		}
	}
	return nil
}

// commitErrors returns the partition errors of a commit response, joined,
// each naming its partition (v10 responses name topics by id only).
func commitErrors(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse) error {
	names := map[[16]byte]string{}
	for _, t := range req.Topics {
		names[t.TopicID] = t.Topic
	}
	var errs []error
	for _, t := range resp.Topics {
		name := t.Topic
		if name == "" {
			name = names[t.TopicID]
		}
		for _, p := range t.Partitions {
			if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
				errs = append(errs, fmt.Errorf("%s/%d: %w", name, p.Partition, e))
			}
		}
	}
	return errors.Join(errs...)
}

// topicIDsFor returns the ids of the topics, which OffsetCommit v10 (Kafka
// 4.2+) names topics by. They are learned from fetch responses; a topic
// not seen there yet is looked up in the cluster's metadata. A broker that
// has no ids takes names, so a missing id only matters there.
func (s *Source) topicIDsFor(ctx context.Context, topics map[string][]kmsg.OffsetCommitRequestTopicPartition) map[string][16]byte {
	ids := make(map[string][16]byte, len(topics))
	var missing []string
	s.mu.Lock()
	for t := range topics {
		if id, ok := s.topicIDs[t]; ok {
			ids[t] = id
		} else {
			missing = append(missing, t)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return ids
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range missing {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return ids
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range resp.Topics {
		if t.Topic != nil && t.TopicID != ([16]byte{}) {
			ids[*t.Topic] = t.TopicID
			s.topicIDs[*t.Topic] = t.TopicID
		}
	}
	return ids
}

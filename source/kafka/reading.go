package kafka

import (
	"slices"
	"sync"
	"sync/atomic"
)

// reading is the source's state as one level of a priority source:
// paused as a whole (PauseReading) or not, and the topics that covers.
//
// The pause is franz-go's topic pause (PauseFetchTopics), not the partition
// pause that flow control uses: the client keeps the two apart (resuming a
// partition does not resume its paused topic, nor the other way round), so
// a partition that drains its unsettled records while its level is paused
// stays unfetched, and one over its cap stays paused when the level
// resumes. A topic pause is the client's, not an assignment's: it covers
// partitions assigned while it holds, and nothing of it is left on a
// partition that was revoked meanwhile. Records fetched and not yet
// polled when the pause starts are dropped by the client and fetched again
// after ResumeReading, from the same offset: nothing is skipped.
type reading struct {
	mu     sync.Mutex // orders pauses, resumes and the topics learned on assignment
	paused atomic.Bool
	pauses atomic.Int64
	topics []string // with Config.Regex: the topics assigned so far
}

// PauseReading stops fetching every topic of the source until
// ResumeReading, so that another level's records are fetched sooner: a
// priority source (source.Priority) calls it on a lower level while a
// higher one has work waiting. Records already fetched may still be
// delivered; settles and commits go on. With Config.Regex it covers the
// topics assigned so far and each one assigned while it holds. Calling it
// while paused does nothing. It is safe from any goroutine.
func (s *Source) PauseReading() {
	r := &s.reading
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paused.Load() {
		return
	}
	r.paused.Store(true)
	r.pauses.Add(1)
	if ts := s.readTopics(); len(ts) > 0 {
		s.cl.PauseFetchTopics(ts...)
	}
}

// ResumeReading undoes PauseReading. Partitions that flow control holds
// (MaxUnsettledPerPartition) stay paused until they drain.
func (s *Source) ResumeReading() {
	r := &s.reading
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.paused.Load() {
		return
	}
	r.paused.Store(false)
	if ts := s.readTopics(); len(ts) > 0 {
		s.cl.ResumeFetchTopics(ts...)
	}
}

// readTopics returns the topics a reading pause covers: the configured
// ones, or with Regex those assigned so far. Called with reading.mu held.
func (s *Source) readTopics() []string {
	if s.cfg.Regex {
		return s.reading.topics
	}
	return s.cfg.Topics
}

// learnTopics, called on assignment, notes the topics a regex
// subscription matched and, if reading is paused, pauses the new ones:
// franz-go calls OnPartitionsAssigned before it fetches them.
func (s *Source) learnTopics(assigned map[string][]int32) {
	if !s.cfg.Regex {
		return // the configured topics are paused by name already
	}
	r := &s.reading
	r.mu.Lock()
	defer r.mu.Unlock()
	var fresh []string
	for t := range assigned {
		if !slices.Contains(r.topics, t) {
			fresh = append(fresh, t)
		}
	}
	r.topics = append(r.topics, fresh...)
	if r.paused.Load() && len(fresh) > 0 {
		s.cl.PauseFetchTopics(fresh...)
	}
}

// Topics returns the topics the source reads: Config.Topics, or with
// Config.Regex the topics assigned to it so far (none before it runs). A
// priority source uses it to refuse two levels that read the same topic.
func (s *Source) Topics() []string {
	r := &s.reading
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(s.readTopics())
}

// Lag returns how many records wait at the broker to be fetched, summed
// over the assigned partitions: the high watermark each partition's last
// fetch reported minus the offset after the last record delivered. It is
// an estimate (0 before the first records, stale while a partition is not
// fetched) for a priority source to tell a level that has work waiting
// at the broker even when its pipe is momentarily empty.
//
// A partition whose log ends in what is never delivered — a transaction's
// commit marker, a compacted-away record — keeps a lag of 1 (or more)
// until its next record, as the client reports no fetch without records.
// A priority source then counts the level as pressing: it pauses the
// levels below only while their own pipes are half full, so they fetch
// less far ahead, but are never starved.
func (s *Source) Lag() int64 {
	s.mu.Lock() // then each partition's, as forget takes them
	defer s.mu.Unlock()
	var lag int64
	for _, p := range s.parts {
		p.mu.Lock()
		if p.nextOff >= 0 {
			lag += max(0, p.hwm-p.nextOff)
		}
		p.mu.Unlock()
	}
	return lag
}

package kafka

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// TopicPerLevel makes the sink write each message to the topic of its
// level of priority (Envelope.Priority, 0 the highest, set by
// source.Priority or flow.Prioritize): topics[0] for level 0, topics[1]
// for level 1, and so on, in place of the topic of the Encoder's record
// (Records("") then suffices). A message of a level that has no topic
// fails with a reason wrapping ErrUnproducible: it is never written to
// another level's topic. No topics, an empty name, or two levels sharing
// a topic are reported by Validate. Default: the Encoder's topic.
func TopicPerLevel[T any](topics ...string) Option[T] {
	return func(s *Sink[T]) {
		s.levelTopics = append([]string(nil), topics...)
		if len(topics) == 0 {
			s.invalid = &stream.ConfigError{Stage: s.name, Argument: "TopicPerLevel", Reason: "need a topic per level, got none"}
		}
		seen := map[string]int{}
		for l, t := range topics {
			if t == "" {
				s.invalid = &stream.ConfigError{Stage: s.name, Argument: "TopicPerLevel", Reason: fmt.Sprintf("level %d has an empty topic name", l)}
				return
			}
			if k, dup := seen[t]; dup {
				s.invalid = &stream.ConfigError{Stage: s.name, Argument: "TopicPerLevel",
					Reason: fmt.Sprintf("levels %d and %d share the topic %q", k, l, t)}
				return
			}
			seen[t] = l
		}
	}
}

// LevelHeader makes the sink write each message's level of priority
// (Envelope.Priority, in decimal: "0" the highest) in the header key of its
// record, replacing one the Encoder set: the one-topic design, where a
// consumer reads the level back from the header. An empty key is
// reported by Validate. Default: no such header.
func LevelHeader[T any](key string) Option[T] {
	return func(s *Sink[T]) {
		s.levelHeader = key
		if key == "" {
			s.invalid = &stream.ConfigError{Stage: s.name, Argument: "LevelHeader", Reason: "the header key is empty"}
		}
	}
}

// byLevel applies TopicPerLevel and LevelHeader to the record of m.
func (s *Sink[T]) byLevel(m *stream.Message[T], rec *kgo.Record) error {
	if rec == nil {
		return nil // check says why
	}
	if s.levelHeader != "" {
		v := strconv.AppendUint(nil, uint64(m.Priority), 10)
		set := false
		for i := range rec.Headers {
			if rec.Headers[i].Key == s.levelHeader {
				rec.Headers[i].Value, set = v, true
			}
		}
		if !set {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: s.levelHeader, Value: v})
		}
	}
	if s.levelTopics != nil {
		if int(m.Priority) >= len(s.levelTopics) {
			return fmt.Errorf("%w: level of priority %d has no topic (TopicPerLevel gives levels 0 to %d)",
				ErrUnproducible, m.Priority, len(s.levelTopics)-1)
		}
		rec.Topic = s.levelTopics[m.Priority]
	}
	return nil
}

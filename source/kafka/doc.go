// Package kafka is a consumer-group source for Kafka-compatible brokers
// (Apache Kafka, Redpanda, Azure Event Hubs' Kafka endpoint), built on
// franz-go.
//
// Each record becomes a stream.Message[[]byte] with its key, headers,
// topic, partition, offset and timestamp (with Envelope.AppendTime set
// when the topic's timestamps are the broker's, LogAppendTime, rather
// than the producer's). The source tracks, per assigned
// partition, which delivered records are settled and commits (through its
// Commit method, called by sink/checkpoint) the offset below which all of
// them are: at-least-once, with nothing lost. A partition with too many
// unsettled records stops being fetched until it drains. As a level of a
// priority source (source.Priority), the whole source stops fetching
// (PauseReading) while a higher level has work waiting; the two pauses
// are independent.
//
// Partition lifecycle: on assignment the partition gets fresh state; on
// revocation the source commits what is settled for it before giving it up
// and ignores any later settle of its records (they are the new owner's to
// redo); on loss it commits nothing. The lock the revocation takes is the
// one every settle takes, and it is never held across a channel send or a
// broker call other than the commit itself.
package kafka

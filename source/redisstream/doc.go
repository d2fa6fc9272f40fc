// Package redisstream is a source that reads Redis streams as a member of
// a consumer group: a queue of competing consumers with at-least-once
// delivery, for a team that runs Redis and no Kafka.
//
// The vocabulary:
//
//   - An entry is one element of a stream, with an ID
//     ("<milliseconds>-<sequence>") and fields. Its value is the field
//     Config.Field ("value"); its key and headers are the fields "key" and
//     "h:<name>" (internal/redisentry describes the layout that
//     sink/redisstream writes).
//   - Read: XREADGROUP hands an entry to one consumer of the group and
//     keeps it in the group's pending list until it is acknowledged
//     (XACK). The source acknowledges an entry once its message is
//     settled, whatever the outcome, in batches: one pipelined round trip
//     for what was settled while the previous one was out.
//   - In flight: read and not yet acknowledged. MaxInFlight bounds it, and
//     each read asks for no more than the room left, so a slow pipeline
//     leaves its backlog in Redis.
//   - Take over (reclaim): an entry idle longer than MinIdle in another
//     consumer's hands (it crashed, or was cut off) is claimed by this
//     one (XAUTOCLAIM). A live source renews its own entries every
//     MinIdle/3 so that none of them is taken while it works on it.
//   - Poison: an entry delivered more than MaxDeliveries times. It is
//     moved, with an entry that has no value, to the dead-letter stream,
//     with its fields and why, in one transaction with its XACK.
//
// Each entry becomes a stream.Message[[]byte]: Topic is the stream's
// name, Partition 0, Offset the entry ID as an int64
// (redisentry.Offset), Timestamp the ID's milliseconds, Attempt the
// deliveries before this one.
package redisstream

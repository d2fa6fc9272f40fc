// Package redisstream writes a pipeline's messages to Redis Streams: a
// Sink appends one entry per message (XADD) and settles the message once
// Redis has answered; a Producer lets the Kafka sinks of sink/kafka (dead
// letters, parkings, failure queues) write to Redis Streams instead of a
// Kafka broker. A pipeline for a team that runs Redis and no Kafka reads
// with source/redisstream and writes with this package.
//
// An entry's fields are the message's value ("value"), its key ("key", if
// it has one) and one field "h:<name>" per header, in order — what
// source/redisstream reads back as the same key, value and headers.
//
// Writes are batched: the entries of up to BatchSize messages go in one
// pipeline of XADD commands, one round trip, sent as soon as the sink's
// input is momentarily empty, so batching adds no wait. MaxLen trims each
// stream approximately (XADD MAXLEN ~), MaxBytes bounds an entry.
//
// Delivery is at-least-once. A message is settled only once its entry is
// written; a message whose entry cannot be written for a reason of its own
// (too large, its Encoder failed) fails alone, to the pipeline's failure
// route; a lost connection is retried for RetryFor, then Run fails naming
// the address and the messages not written stay unsettled, for replay. An
// entry whose XADD reached Redis but whose reply was lost with the
// connection is written again: a stream may then hold it twice, so a
// consumer that must not act twice makes its side effects idempotent by a
// request ID the message carries.
package redisstream

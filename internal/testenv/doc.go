// Package testenv starts the real parts that tests run against: an
// in-process Kafka-compatible cluster (franz-go's kfake), a real Apache
// Kafka broker from its Maven jars, and kcat. Every server listens on a
// loopback address and is stopped when the test ends.
package testenv

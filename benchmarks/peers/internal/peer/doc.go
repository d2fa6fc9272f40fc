// Package peer is what the Go implementations of the peers benchmark in the
// main module share (benchmarks/peers/sluice, benchmarks/peers/franzgo):
// the flags and the stdout protocol of /tmp/peers/PROTOCOL.md (issue 18),
// the call every record gets, and the counters and latency histograms the
// "final" line reports. Both peers measure with the same code, so its cost
// is the same in both rows of the table.
//
// Vocabulary: a record is received when the consumer gets it from its
// client; its call is done when the 2 ms wait returns; its latency is done
// minus max(record timestamp, time of the first record received), its
// in-process latency done minus received.
package peer

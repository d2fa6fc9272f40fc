// Package streamtest is the shared contract suite that every Source and
// Sink of sluice passes, and that authors of their own stages can run.
//
// TestSource and TestSink hold every stage to the base contract: each
// message settled exactly once, cancel and drain, errors surfaced, no
// goroutine left behind. A connector promises more than that according to
// what it connects to, and says so in its case's Features: each feature
// declared adds the checks that hold the connector to it, and a feature not
// declared adds nothing (no check is registered, so none is skipped).
//
// The vocabulary of the suite:
//
//   - A case (SourceCase, SinkCase) is what a test gives the suite: how to
//     build the stage under test, what it promises, and how to look at
//     what it did.
//   - The index of a value is its position in the order the case produced
//     it: New(t, n) and Value(i) give indexes 0, 1, ..., and
//     RestartCase.Produce the indexes it is asked for. Index reads it back,
//     so that the suite can tell which messages came, in which order, and
//     which came twice.
//   - A partition is what a source keeps in order: the messages of one
//     Envelope Topic and Partition (a Kafka partition, a Redis stream; a
//     source without positions is one partition).
//   - To commit is to record, through the stream.Committer the source
//     offers, that what is settled is done; a new instance of the source
//     (a new consumer of the same group) resumes from there.
//   - A restart is a source instance closed and a new one built on the same
//     topic and group (RestartCase.NewSource), or the server the source
//     reads from stopped and started again (RestartCase.RestartServer).
package streamtest

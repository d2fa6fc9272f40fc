package streamtest

// Features are the promises a connector makes beyond the base contract.
// Each one declared adds its checks to TestSource or TestSink; one not
// declared adds nothing. The zero value declares nothing: a stage with no
// order to keep. Declare only what the connector really does: a declared
// feature whose check cannot run (Index missing) fails the test.
type Features struct {
	// OrderedPerPartition: the messages of one partition (one Topic and
	// Partition of the envelope) arrive in the order they were produced.
	// For a sink: each partition of its destination holds the messages it
	// was given, in the order it was given them. Needs Index (and, for a
	// sink, Written).
	OrderedPerPartition bool
}

package streamtest

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

// Features are the promises a connector makes beyond the base contract.
// Each one declared adds its checks to TestSource (or TestSink, which
// knows only OrderedPerPartition); one not declared adds nothing. The zero
// value declares nothing: an in-memory stage with no order to keep and no
// state to resume from. Declare only what the connector really does: a
// declared feature whose check cannot run (Index or Restart missing) fails
// the test.
type Features struct {
	// OrderedPerPartition: the messages of one partition (one Topic and
	// Partition of the envelope) arrive in the order they were produced.
	// For a sink: each partition of its destination holds the messages it
	// was given, in the order it was given them. Needs Index (and, for a
	// sink, Written).
	OrderedPerPartition bool

	// ReplayAfterRestart: a new instance of the source, on the same topic
	// and consumer group, resumes from the last commit. What was settled
	// and committed is not delivered again; what was produced since, even
	// while no instance ran, is delivered. Needs Restart.
	ReplayAfterRestart bool

	// RedeliversUnsettled: messages delivered but never settled before the
	// instance was closed come back to the next instance (at-least-once).
	// With ReplayAfterRestart, the check also holds that the messages
	// settled and committed ahead of them in their partition do not.
	// Needs Restart.
	RedeliversUnsettled bool

	// ReconnectsAfterServerRestart: when the server the source reads from
	// goes away and comes back (with its data) while the pipeline runs, the
	// same instance resumes, without Run ending: it delivers what is
	// produced after the restart and commits again. With
	// ReplayAfterRestart, what it committed before the restart is not
	// delivered again. Needs Restart and RestartCase.RestartServer.
	ReconnectsAfterServerRestart bool
}

// restarts reports whether f declares a feature whose check restarts the
// source or its server.
func (f Features) restarts() bool {
	return f.ReplayAfterRestart || f.RedeliversUnsettled || f.ReconnectsAfterServerRestart
}

// sourceOnly names the declared features that only a source can have.
func (f Features) sourceOnly() string {
	var names []string
	for _, d := range []struct {
		on   bool
		name string
	}{
		{f.ReplayAfterRestart, "ReplayAfterRestart"},
		{f.RedeliversUnsettled, "RedeliversUnsettled"},
		{f.ReconnectsAfterServerRestart, "ReconnectsAfterServerRestart"},
	} {
		if d.on {
			names = append(names, d.name)
		}
	}
	return strings.Join(names, ", ")
}

// Resumable is a source whose progress outlives it: it commits what is
// settled (stream.Committer), and a new instance on the same topic and
// group resumes from there. The Kafka source is one.
type Resumable[T any] interface {
	stream.Source[T]
	stream.Committer
	// Close ends the instance after its pipeline's Run has returned, so
	// that the next instance can take over (a Kafka member leaves its
	// group). It may commit what is settled.
	Close(ctx context.Context) error
}

// RestartCase is one fresh topic and consumer group (a Kafka topic and
// group, a Redis stream and its group) for a check that restarts the
// source or its server, with what the check does to them. Each such check
// asks SourceCase.Restart for its own, so checks share nothing.
type RestartCase[T any] struct {
	// Produce puts n messages in, with the indexes first, first+1, ...,
	// first+n-1 in that order, and returns when the server has stored
	// them. The check may call it while no instance of the source runs.
	Produce func(t *testing.T, first, n int)

	// NewSource returns a new instance of the source on the topic, as a
	// member of the same consumer group: it starts where the instances
	// before it committed, and at the oldest message if none did. The
	// check runs it in a pipeline of its own and closes it.
	NewSource func(t *testing.T) Resumable[T]

	// RestartServer stops the server and starts it again on the same
	// address with its data, and returns when it accepts connections
	// again; connected clients see their connections drop. Required by
	// ReconnectsAfterServerRestart.
	RestartServer func(t *testing.T)
}

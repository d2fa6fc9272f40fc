package stream

import (
	"context"
	"errors"
	"sync"
)

// Committer records, for each partition a source reads, the position below
// which every message is settled, so that a restarted pipeline resumes
// there. A source that can resume provides one (the Kafka source commits
// consumer-group offsets); a checkpoint sink calls it. Neither knows the
// other: they meet here.
type Committer interface {
	// Commit records every position that advanced since the last call. It
	// may be called concurrently with settles, never concurrently with
	// itself.
	Commit(ctx context.Context) error
}

// CommitterFunc adapts a function to a Committer.
type CommitterFunc func(ctx context.Context) error

// Commit calls f.
func (f CommitterFunc) Commit(ctx context.Context) error { return f(ctx) }

// Committers returns a Committer that commits through each of cs at once,
// every one of them even when one fails or hangs until the context ends,
// and returns their errors joined: the committer of a pipeline reading
// several sources (one Kafka source per level of priority, and one of
// replays) for its checkpoint sink. Each of cs is still never called
// concurrently with itself.
func Committers(cs ...Committer) Committer {
	return committers(cs)
}

type committers []Committer

func (cs committers) Commit(ctx context.Context) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Commit(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// CommitsScheduled tells each of cs that is a ScheduledCommitter.
func (cs committers) CommitsScheduled() {
	for _, c := range cs {
		if s, ok := c.(ScheduledCommitter); ok {
			s.CommitsScheduled()
		}
	}
}

// ScheduledCommitter is a Committer that wants to know that something
// will call its Commit while the pipeline runs (a checkpoint sink, which
// tells it when it starts, before its first commit is due): a source that
// warns when nothing commits its records need not, however long the
// checkpoint's interval.
type ScheduledCommitter interface {
	Committer
	CommitsScheduled()
}

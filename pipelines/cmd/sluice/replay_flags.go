package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// replayFlags are the flags of `sluice run` that say where a worker parks
// what fails for now (a request whose service is down or throttling, a
// compensation whose undo cannot be done now), how it replays it, and, for
// the supervisor, where compensations that never can be done go.
type replayFlags struct {
	retryTopic, replayGroup     string
	replayAfter, maxReplayDelay time.Duration
	maxParkings                 int
	deadLetterTopic             string // the supervisor's
}

// replayDefaults are each worker's: the scheduler replays a request for as
// long as it can still complete before its deadline; the supervisor
// retries an undo for as long as it takes. Both replay at once what
// waited for a service that is back.
var replayDefaults = map[string]struct {
	topic        string
	after, most  time.Duration
	parkings     int
	parkingsHelp string
}{
	"delivery": {"delivery-requests-retry", 2 * time.Second, time.Minute, 0,
		"times a request may be parked before a transient failure of it counts as permanent and it is compensated " +
			"(0: no bound; its deadline decides)"},
	"supervisor": {"delivery-failures-retry", supervisor.DefaultReplayAfter, supervisor.DefaultMaxReplayDelay,
		supervisor.DefaultMaxParkings, "times a compensation is parked before a transient failure of it counts as permanent " +
			"and it is dead-lettered (0: no bound, retried for as long as it takes)"},
}

func (r *replayFlags) register(fs *flag.FlagSet, which string) {
	d := replayDefaults[which]
	fs.StringVar(&r.retryTopic, "retry-topic", d.topic, "topic where what fails for now is parked, and replayed from")
	fs.StringVar(&r.replayGroup, "replay-group", "", `consumer group that replays the retry topic (default: -group plus "-replay")`)
	fs.DurationVar(&r.replayAfter, "replay-after", d.after, "wait before a parked message is replayed; it doubles with each parking")
	fs.DurationVar(&r.maxReplayDelay, "max-replay-delay", d.most, "the longest that wait grows to")
	fs.IntVar(&r.maxParkings, "max-parkings", d.parkings, d.parkingsHelp)
	if which == "supervisor" {
		fs.StringVar(&r.deadLetterTopic, "supervisor-dead-letter-topic", "delivery-compensation-dead-letters",
			"topic of compensations that cannot be done, for an operator")
	}
}

// validate names the first bad flag; it runs before the worker connects.
func (r *replayFlags) validate(which string) error {
	switch {
	case r.retryTopic == "":
		return errors.New("-retry-topic: a worker needs a topic to park what fails for now in")
	case which == "supervisor" && r.deadLetterTopic == "":
		return errors.New("-supervisor-dead-letter-topic: a supervisor needs a topic for compensations that cannot be done")
	case which == "supervisor" && r.retryTopic == r.deadLetterTopic:
		return fmt.Errorf("-retry-topic and -supervisor-dead-letter-topic are both %q: they must differ", r.retryTopic)
	case r.replayAfter <= 0:
		return fmt.Errorf("-replay-after %v: must be positive", r.replayAfter)
	case r.maxReplayDelay < r.replayAfter:
		return fmt.Errorf("-max-replay-delay %v: must be at least -replay-after %v", r.maxReplayDelay, r.replayAfter)
	case r.maxParkings < 0:
		return fmt.Errorf("-max-parkings %d: must not be negative (0: no bound)", r.maxParkings)
	}
	return nil
}

// parkedFor is how long a request waits in all over its parkings: the
// replay delays, doubling from -replay-after up to -max-replay-delay, one
// per parking (0 with no bound on the parkings).
func (r *replayFlags) parkedFor() time.Duration {
	var total time.Duration
	d := r.replayAfter
	for range r.maxParkings {
		total += d
		d = min(2*d, r.maxReplayDelay)
	}
	return total
}

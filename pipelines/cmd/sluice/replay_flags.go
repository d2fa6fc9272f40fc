package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
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

// replayDefaults are each worker's: the scheduler replays requests within
// about a minute and a half and then compensates them; the supervisor
// retries an undo for as long as it takes.
var replayDefaults = map[string]struct {
	topic        string
	after, most  time.Duration
	parkings     int
	parkingsHelp string
}{
	"delivery": {"delivery-requests-retry", 2 * time.Second, time.Minute, 5,
		"times a request is parked before a transient failure of it counts as permanent and it is compensated"},
	"supervisor": {"delivery-failures-retry", supervisor.DefaultReplayAfter, supervisor.DefaultMaxReplayDelay,
		supervisor.DefaultMaxParkings, "times a compensation is parked before a transient failure of it counts as permanent " +
			"and it is dead-lettered (0: no bound, retried for as long as it takes)"},
}

func (r *replayFlags) register(fs *flag.FlagSet, which string) error {
	d := replayDefaults[which]
	// Not SLUICE_RETRY_TOPIC: SLUICE_RETRY_ starts the retry policies'
	// variables.
	fs.StringVar(&r.retryTopic, "retry-topic", env("SLUICE_PARK_TOPIC", d.topic),
		"topic where what fails for now is parked, and replayed from ($SLUICE_PARK_TOPIC)")
	fs.StringVar(&r.replayGroup, "replay-group", env("SLUICE_REPLAY_GROUP", ""),
		`consumer group that replays the retry topic ($SLUICE_REPLAY_GROUP; default: -group plus "-replay")`)
	after, err := envDuration("SLUICE_REPLAY_AFTER", d.after)
	if err != nil {
		return err
	}
	most, err := envDuration("SLUICE_MAX_REPLAY_DELAY", d.most)
	if err != nil {
		return err
	}
	fs.DurationVar(&r.replayAfter, "replay-after", after,
		"wait before a parked message is replayed; it doubles with each parking ($SLUICE_REPLAY_AFTER)")
	fs.DurationVar(&r.maxReplayDelay, "max-replay-delay", most, "the longest that wait grows to ($SLUICE_MAX_REPLAY_DELAY)")
	parkings, err := envInt("SLUICE_MAX_PARKINGS", d.parkings)
	if err != nil {
		return err
	}
	fs.IntVar(&r.maxParkings, "max-parkings", parkings, d.parkingsHelp+" ($SLUICE_MAX_PARKINGS)")
	if which == "supervisor" {
		fs.StringVar(&r.deadLetterTopic, "supervisor-dead-letter-topic",
			env("SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC", "delivery-compensation-dead-letters"),
			"topic of compensations that cannot be done, for an operator ($SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC)")
	}
	return nil
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
	case r.maxParkings < 0 || which == "delivery" && r.maxParkings < 1:
		return fmt.Errorf("-max-parkings %d: must be at least %d", r.maxParkings, map[string]int{"delivery": 1, "supervisor": 0}[which])
	}
	return nil
}

// envInt reads an integer from the environment, or def if unset.
func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("$%s=%q is not a whole number: %w", name, v, err)
	}
	return n, nil
}

// parkedFor is how long a request waits in all over its parkings: the
// replay delays, doubling from -replay-after up to -max-replay-delay, one
// per parking.
func (r *replayFlags) parkedFor() time.Duration {
	var total time.Duration
	d := r.replayAfter
	for range r.maxParkings {
		total += d
		d = min(2*d, r.maxReplayDelay)
	}
	return total
}

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

// supervisorFlags are the flags of `sluice run supervisor` that say where
// compensations that cannot be done now are parked, how they are
// replayed, and where the ones that never can are dead-lettered.
type supervisorFlags struct {
	retryTopic, deadLetterTopic, replayGroup string
	replayAfter, maxReplayDelay              time.Duration
	maxParkings                              int
}

func (s *supervisorFlags) register(fs *flag.FlagSet) error {
	fs.StringVar(&s.retryTopic, "retry-topic", env("SLUICE_SUPERVISOR_RETRY_TOPIC", "delivery-failures-retry"),
		"topic where compensations that fail for now are parked, and replayed from ($SLUICE_SUPERVISOR_RETRY_TOPIC)")
	fs.StringVar(&s.deadLetterTopic, "supervisor-dead-letter-topic",
		env("SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC", "delivery-compensation-dead-letters"),
		"topic of compensations that cannot be done, for an operator ($SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC)")
	fs.StringVar(&s.replayGroup, "replay-group", env("SLUICE_REPLAY_GROUP", ""),
		`consumer group that replays the retry topic ($SLUICE_REPLAY_GROUP; default: -group plus "-replay")`)
	after, err := envDuration("SLUICE_REPLAY_AFTER", supervisor.DefaultReplayAfter)
	if err != nil {
		return err
	}
	most, err := envDuration("SLUICE_MAX_REPLAY_DELAY", supervisor.DefaultMaxReplayDelay)
	if err != nil {
		return err
	}
	fs.DurationVar(&s.replayAfter, "replay-after", after,
		"wait before a parked compensation is replayed; it doubles with each parking ($SLUICE_REPLAY_AFTER)")
	fs.DurationVar(&s.maxReplayDelay, "max-replay-delay", most, "the longest that wait grows to ($SLUICE_MAX_REPLAY_DELAY)")
	parkings, err := envInt("SLUICE_MAX_PARKINGS", supervisor.DefaultMaxParkings)
	if err != nil {
		return err
	}
	fs.IntVar(&s.maxParkings, "max-parkings", parkings,
		"times a compensation is parked before a transient failure of it counts as permanent and it is dead-lettered ($SLUICE_MAX_PARKINGS)")
	return nil
}

// validate names the first bad flag; it runs before the worker connects.
func (s *supervisorFlags) validate() error {
	switch {
	case s.retryTopic == "":
		return errors.New("-retry-topic: a supervisor needs a topic to park compensations in")
	case s.deadLetterTopic == "":
		return errors.New("-supervisor-dead-letter-topic: a supervisor needs a topic for compensations that cannot be done")
	case s.retryTopic == s.deadLetterTopic:
		return fmt.Errorf("-retry-topic and -supervisor-dead-letter-topic are both %q: they must differ", s.retryTopic)
	case s.replayAfter <= 0:
		return fmt.Errorf("-replay-after %v: must be positive", s.replayAfter)
	case s.maxReplayDelay < s.replayAfter:
		return fmt.Errorf("-max-replay-delay %v: must be at least -replay-after %v", s.maxReplayDelay, s.replayAfter)
	case s.maxParkings < 1:
		return fmt.Errorf("-max-parkings %d: must be at least 1", s.maxParkings)
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
